"""The mutation operators change what they say, and only that (no backend: CPU tensors)."""

from __future__ import annotations

import torch

from conformance.measure.mutants import values
from conformance.measure.mutants.campaign import plan
from conformance.measure.mutants.operators import OPERATORS
from conformance.measure.mutants.signature import Signature, category


def _ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return (a.view(ints).to(torch.int64) - b.view(ints).to(torch.int64)).abs()


def test_ulps_moves_every_finite_nonzero_element_k_ulps_and_nothing_else():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        t = torch.tensor([1.0, -2.5, 0.0, float("inf"), float("nan"), 3e-3], dtype=dtype)
        moved = values.ulps(4)(t.clone())
        apart = _ulps_apart(moved, t)
        assert apart[[0, 1, 5]].tolist() == [4, 4, 4], dtype
        assert values.identical(moved[2:5], t[2:5]), dtype
        assert (moved[[0, 1, 5]].abs() > t[[0, 1, 5]].abs()).all(), dtype  # away from zero


def test_every_8th_and_past_n_touch_only_their_elements():
    t = torch.arange(1, 2001, dtype=torch.float32)
    eighth = values.ulps(4, every=8)(t.clone())
    assert (eighth != t).nonzero().flatten().tolist() == list(range(7, 2000, 8))
    past = values.past(1024, "wrong")(t.clone())
    assert values.identical(past[:1024], t[:1024]) and (past[1024:] != t[1024:]).all()
    assert values.identical(values.past(4096, "wrong")(t.clone()), t)  # nothing past 4,096


def test_special_value_operators():
    t = torch.tensor([0.0, -0.0, float("nan"), float("-inf"), 1e-40, 8.0, 0.1])
    assert values.nan_to_zero(t)[2] == 0
    assert values.zero_to_nan(t)[:2].isnan().all()
    assert values.infinity_sign(t)[3] == float("inf")
    assert not values.negative_zero(t)[1].signbit()
    assert values.flush_subnormals(t)[4] == 0 and values.flush_subnormals(t)[5] == 8
    assert values.sign_of_small()(t)[6] == -0.1 and values.sign_of_small()(t)[5] == 8
    ints = torch.arange(16)
    assert (values.integers_off()(ints) != ints).sum() == 2
    assert not values.identical(values.off(torch.tensor([True])), torch.tensor([True]))


def test_identical_sees_signed_zeros_and_nan_payloads():
    assert not values.identical(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert values.identical(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    assert not values.identical(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))


def test_schemas_decide_which_operators_apply():
    kinds = {o: Signature.of(o).kind for o in ("abs", "abs.out", "abs_", "view", "cat")}
    assert kinds == {
        "abs": "functional",
        "abs.out": "out",
        "abs_": "inplace",
        "view": "view",
        "cat": "functional",
    }
    applies = {name for name, op in OPERATORS.items() if op.applies(Signature.of("abs.out"))}
    assert {"out-ignored", "ulp:4", "strided-as-contiguous"} <= applies
    assert "view-as-copy" not in applies and "inplace-into-copy" not in applies
    assert OPERATORS["view-as-copy"].applies(Signature.of("view"))
    assert not OPERATORS["ulp:4"].applies(Signature.of("view"))  # a view writes nothing
    assert Signature.of("_foreach_mul_.Scalar").tensor_list_out
    assert category("_foreach_mul_.Scalar") == "foreach" and category("cumsum.out") == "scans"


def test_plan_crosses_overloads_with_operators_and_samples_by_seed():
    every = plan(["abs", "abs.out", "view"], list(OPERATORS))
    assert all(m.operator != "none" for m in every)
    assert {m.operator for m in every if m.overload == "view"} <= {
        "view-as-copy",
        "leak-after-first",
        "version-not-bumped",
    }
    assert plan(["abs", "abs.out"], list(OPERATORS), 5, seed=3) == plan(
        ["abs", "abs.out"], list(OPERATORS), 5, seed=3
    )
    assert plan(["abs", "abs.out"], list(OPERATORS), 5, seed=3) != plan(
        ["abs", "abs.out"], list(OPERATORS), 5, seed=4
    )
    assert plan(["no_such_op"], list(OPERATORS)) == []


def test_wrapped_numbers_become_tensors_with_the_same_promotion():
    """A wrapped number reaches a Python kernel as a Python number; the kernel it replaced takes
    a tensor that must promote as the wrapped number did (a 0-dim float16 times 0.1 stays
    float16, computed with the scalar in float32 as the kernel's opmath has it)."""
    sig = Signature.of("mul.Tensor")
    half = torch.tensor(1.5, dtype=torch.float16)
    args, _, cast = sig.rewrapped((half, 0.1), {})
    assert args[1].dtype == torch.float32 and cast == torch.float16
    assert (args[0] * args[1]).to(cast) == half * 0.1
    args, _, cast = sig.rewrapped((torch.ones(3, dtype=torch.float16), 2), {})
    assert args[1].dtype == torch.int64 and args[1].dim() == 0 and cast is None
    args, _, cast = sig.rewrapped((torch.tensor(3), 2.5), {})
    assert args[1].dtype == torch.float32 and cast is None
    assert sig.rewrapped((half, half), {})[2] is None  # nothing to rewrap
