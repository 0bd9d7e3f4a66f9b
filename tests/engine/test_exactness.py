"""CPU's exactness is decided by evidence (engine/exactness.py): single IEEE operations are
exact, transcendentals and reductions are not, half precision only where float32 is, and a
small sample proves nothing."""

from __future__ import annotations

import torch

from conformance.engine import exactness
from conformance.engine.calls import Call
from conformance.engine.exactness import Exactness


def _calls(overload: str, dtype: torch.dtype, arity: int, shape=(8, 8)) -> list[Call]:
    g = torch.Generator().manual_seed(0)
    return [
        Call(overload, tuple(torch.randn(shape, generator=g).to(dtype) for _ in range(arity)))
        for _ in range(3)
    ]


def _measure(op, overload: str, dtype: torch.dtype, arity: int, shape=(8, 8)) -> Exactness:
    return exactness.measure(op, _calls(overload, dtype, arity, shape), dtype, set(range(arity)))


def test_single_ieee_operations_are_exact_in_float32_and_half_types():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for op in (torch.ops.aten.mul.Tensor, torch.ops.aten.div.Tensor):
            found = _measure(op, str(op), dtype, 2)
            assert found.exact, (op, dtype, found)
            assert found.elements >= exactness.TARGET_ELEMENTS


def test_exp_and_sum_are_not_exact_and_say_where():
    found = _measure(torch.ops.aten.exp.default, "exp", torch.float32, 1)
    assert not found.exact and "not correctly rounded" in found.why, found
    found = _measure(torch.ops.aten.sum.default, "sum", torch.float32, 1, shape=(64, 64))
    assert not found.exact, found


def test_half_precision_is_exact_only_where_float32_is():
    exp = torch.ops.aten.exp.default
    own = _measure(exp, "exp", torch.float16, 1)  # may well be correctly rounded by luck
    float32 = _measure(exp, "exp", torch.float32, 1)
    judged = exactness.judge(own, float32, torch.float16)
    assert not judged.exact and "float32 is not exact" in judged.why
    mul = torch.ops.aten.mul.Tensor
    float32 = _measure(mul, "mul", torch.float32, 2)
    assert exactness.judge(None, float32, torch.float64).exact  # inferred from float32


def test_too_few_elements_prove_nothing():
    calls = [Call("mul", (torch.ones(4), torch.ones(4)))]
    found = exactness.measure(torch.ops.aten.mul.Tensor, calls, torch.float32, set())
    assert not found.exact and "only 4 result elements" in found.why


def test_verdicts_round_trip_through_json():
    found = Exactness(True, 4096, "correctly rounded on 4096 elements")
    assert Exactness.from_json(found.to_json()) == found


def test_an_op_that_accumulates_is_not_exact_even_where_cpu_rounds_it_correctly():
    """CPU's float32 cumsum accumulates in double: correctly rounded, yet a device that sums in
    float32 (in another order) is as right. The dependence on many inputs says so."""
    cumsum = torch.ops.aten.cumsum.default
    g = torch.Generator().manual_seed(0)
    calls = [Call("cumsum", (torch.randn(8, 8, generator=g), 1)) for _ in range(3)]
    found = exactness.measure(cumsum, calls, torch.float32, {0})
    assert not found.exact and found.why.startswith("accumulates: a result element depends on 8")
