"""Tolerances from evidence (engine/evidence.py): a -sizes, -arguments or -models sample is
judged by CPU's own error against the same call in float64, so a large reduction is judged as
tightly as CPU is accurate, and a half-precision multiply-add as loosely as CPU itself errs."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import evidence
from conformance.engine.calls import Call
from conformance.engine.compare import ErrorStats, Mismatch, compare_values, tolerance
from conformance.engine.placing import place

SUM = torch.ops.aten.sum.dim_IntList


def _scale(op, call: Call):
    placed = place(call, "contiguous", op._schema)
    cpu = placed.materialize("cpu")
    return evidence.measured_scale(op, op._schema, placed, op(*cpu.args, **cpu.kwargs), {})


def test_a_large_bfloat16_sum_is_judged_by_cpu_s_own_error():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(65537, generator=g) + 0.5).bfloat16()
    scale = _scale(SUM, Call("sum.dim_IntList", (x, [0])))
    rtol, atol = tolerance(torch.bfloat16, scale)
    cpu, truth = SUM(x, [0]), x.double().sum()
    assert atol >= 2 * abs(float(cpu) - float(truth))  # as accurate as CPU, erring the other way
    compare_values("output", cpu, cpu, scale, ErrorStats())
    tiles = torch.tensor(float(x[:4096].float().sum()), dtype=torch.bfloat16)  # stops adding
    with pytest.raises(Mismatch):
        compare_values("output", tiles, cpu, scale, ErrorStats())


def test_a_float32_sum_cpu_gets_right_keeps_the_base_tolerance():
    x = torch.rand(65537, generator=torch.Generator().manual_seed(1)) + 0.5
    rtol, atol = tolerance(torch.float32, _scale(SUM, Call("sum.dim_IntList", (x, [0]))))
    base = tolerance(torch.float32)
    assert rtol == base[0] and atol < 1e-2  # within a few ulps of 98,000: nothing like 1e-4


def test_nothing_floating_to_measure_gives_no_scale():
    ints = torch.arange(10)
    assert _scale(SUM, Call("sum.dim_IntList", (ints, [0]))) is None


def _run_calls(overload: str, dtype: torch.dtype) -> list[Call]:
    """The -sizes calls the run makes: every matching OpInfo's samples, grown (some carry
    dtype=, as `sum(x, dtype=...)` and `cumsum(x, 0, dtype=...)` do)."""
    from conformance.samples import opinfo, sizes

    ordinary = opinfo.captured_calls(overload, dtype, (), None)
    return sizes.sized_calls(overload, dtype, ordinary, "boundaries")


@pytest.mark.parametrize("overload", ["cumsum", "sum.dim_IntList"])
def test_a_dtype_keyword_is_float64_in_the_truth_so_cpu_s_error_is_measured(overload):
    """Issue 56: the float64 run kept `dtype=torch.float32`, computed in float32 and measured
    CPU against itself (error 0): the -sizes cases of cumsum and sum fell to the bare base
    tolerance. Driven by the calls the run makes."""
    op = getattr(torch.ops.aten, overload.split(".")[0])
    op = getattr(op, overload.split(".")[1] if "." in overload else "default")
    calls = [c for c in _run_calls(overload, torch.float32) if "dtype" in c.kwargs]
    assert calls, "the run's -sizes calls no longer carry dtype=: this test drives nothing"
    big = max(calls, key=lambda c: c.args[0].numel())
    x = big.args[0]
    cpu = op(*big.args, **big.kwargs)
    exact = op(x.double(), *big.args[1:], **{**big.kwargs, "dtype": torch.float64})
    own = float((cpu.double() - exact).abs().max())
    assert own > 0  # CPU's float32 result is rounded: its error is real
    _, atol = tolerance(torch.float32, _scale(op, big))
    assert atol == pytest.approx(tolerance(torch.float32)[1] + evidence.OWN_ERROR * own)


EXP = torch.ops.aten.exp.default


def test_each_element_is_allowed_cpu_s_error_there_not_the_largest_one():
    """Issue 56: CPU's error was pooled over all elements and granted to each, so a bfloat16
    exp 2x off on small results passed beside a large one (exp -sizes: 70 % of elements). Now
    each element of a pointwise op gets twice CPU's error at that element."""
    x = torch.tensor([9.0, 0.5, -1.0, 0.25]).bfloat16()
    call = Call("exp", (x,))
    scale = evidence.measured_scale(EXP, EXP._schema, place(call, "contiguous", EXP._schema),
                                    EXP(x), {}, "exp")  # fmt: skip
    cpu = EXP(x)
    wrong = cpu.clone()
    wrong[1:] *= 2  # every small result 2x off; the large one right
    with pytest.raises(Mismatch):
        compare_values("output", wrong, cpu, scale, ErrorStats())
    compare_values("output", wrong, cpu, dict(scale), ErrorStats())  # pooled: it passed
    compare_values("output", cpu, cpu, scale, ErrorStats())


def test_each_output_has_its_own_allowance():
    """Issue 56: CPU's error was pooled over the outputs of a dtype: in bfloat16 the saved
    inverse std's rounding (~316) became the saved mean's allowance, and a batch norm whose
    saved mean is 0 passed. Each output is judged by its own error now."""
    op = torch.ops.aten._native_batch_norm_legit.no_stats
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(64, 3, generator=g) * 1e-3 + 0.5).bfloat16()
    call = Call("_native_batch_norm_legit.no_stats", (x, None, None, True, 0.1, 1e-5))
    out = op(x, None, None, True, 0.1, 1e-5)
    scale = evidence.measured_scale(
        op, op._schema, place(call, "contiguous", op._schema), out, {},
        "_native_batch_norm_legit.no_stats",
    )  # fmt: skip
    mean = out[1]
    assert set(scale.elements) == {"output 0", "output 1", "output 2"}
    assert float(scale.elements["output 1"].max()) < float(scale.elements["output 2"].max())
    with pytest.raises(Mismatch):
        compare_values("output 1", torch.zeros_like(mean), mean, scale, ErrorStats())
