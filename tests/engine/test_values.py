"""Samples beyond OpInfo's own: sibling twins (samples/twins.py), the values axis
(samples/values.py) and the op specs that carry logic (set_), checked with CPU as the device and
deliberately wrong kernels where a check must fire."""

from __future__ import annotations

import math
import os
import signal
import time

import pytest
import torch

from conformance.engine.calls import Call
from conformance.ops import spec_for
from conformance.samples import twins, values
from tests.engine.fake_kernels import run_with_kernel


def _run(monkeypatch, overload, fn, calls, layout="contiguous"):
    return run_with_kernel(monkeypatch, overload, fn, calls, layout, spec=spec_for(overload))


# ---- twins ----------------------------------------------------------------------------------
def test_scalar_out_derived_from_the_tensor_overload():
    call = Call("eq.Tensor", (torch.arange(6.0).reshape(2, 3), torch.tensor([[2.0]])))
    functional = twins.functional_of("eq.Scalar_out")
    assert functional is torch.ops.aten.eq.Scalar
    derived = twins.derive(call, "eq.Scalar_out", functional)
    assert derived.args[1] == 2.0 and isinstance(derived.args[1], float)
    assert derived.kwargs["out"].dtype == torch.bool and derived.kwargs["out"].shape == (2, 3)
    assert "eq.Tensor" in twins.ranked_sources("eq.Scalar_out")


def test_out_variant_of_a_backward_op_gets_its_grad_input():
    grad, x = torch.ones(3, 4), torch.randn(3, 4)
    call = Call("threshold_backward", (grad, x, 0.0))
    derived = twins.derive(
        call, "threshold_backward.grad_input", twins.functional_of("threshold_backward.grad_input")
    )
    assert derived.kwargs["grad_input"].shape == (3, 4)
    torch.ops.aten.threshold_backward.grad_input(*derived.args, **derived.kwargs)


def test_no_out_variant_is_derived_for_a_sparse_result():
    # _to_sparse.out (reached by `--fallback-ops "_to_sparse*"`): building a dense out= like the
    # sparse result raised, and every case of it ended as a harness error
    call = Call("_to_sparse", (torch.randn(3, 4),))
    functional = twins.functional_of("_to_sparse.out")
    assert functional is not None
    assert twins.derive(call, "_to_sparse.out", functional) is None


def test_siblings_with_other_argument_names_do_not_match():
    assert "max.dim" not in twins.ranked_sources("max.out")  # (self, dim) vs (self, other)
    assert twins.ranked_sources("max.out")[0] == "max.other"


# ---- the values axis ------------------------------------------------------------------------
def test_special_pattern_has_the_values_kernels_get_wrong():
    p = values.special_pattern(torch.float32, extremes=True)
    assert p.isnan().any() and p.isposinf().any() and p.isneginf().any()
    assert any(v == 0 and math.copysign(1, v) < 0 for v in p.tolist())  # -0.0
    tiny = torch.finfo(torch.float32).tiny
    assert ((p.abs() < tiny) & (p != 0)).any()  # subnormal
    assert torch.finfo(torch.float32).max in p.tolist()
    i = values.special_pattern(torch.int64, extremes=True).tolist()
    assert -1 not in i  # INT_MIN / -1 traps in CPU kernels
    assert torch.iinfo(torch.int64).min in i and torch.iinfo(torch.int64).max in i


def test_special_calls_fill_data_operands_not_masks():
    where = Call("where.self", (torch.tensor([True, False] * 8), torch.zeros(16), torch.ones(16)))
    (call,) = values.special_calls([where], torch.float32)
    cond, a, b = call.args
    assert torch.equal(cond, where.args[0])  # the condition is not data
    assert a.isnan().any() and b.isnan().any()
    assert not torch.equal(a.nan_to_num(), b.nan_to_num())  # operands get different values


def test_finite_extremes_stay_out_of_reductions():
    (call,) = values.special_calls(
        [Call("sum.dim_IntList", (torch.ones(4, 4), [1]))], torch.float32
    )
    assert torch.finfo(torch.float32).max not in call.args[0].reshape(-1).tolist()
    (call,) = values.special_calls(
        [Call("add.Tensor", (torch.ones(4, 4), torch.ones(4)))], torch.float32
    )
    assert torch.finfo(torch.float32).max in call.args[0].reshape(-1).tolist()


def test_promotion_calls_mix_dtypes():
    base = Call("add.Tensor", (torch.arange(6).reshape(2, 3), torch.arange(3)))
    calls = values.promotion_calls([base], torch.int64)
    others = [(c.args[1].dtype, c.args[1].dim(), c.cpu_args) for c in calls]
    assert (torch.float32, 1, frozenset()) in others  # int tensor + float tensor
    assert (torch.float64, 0, frozenset({1})) in others  # + a 0-dim CPU float tensor
    assert (torch.bool, 1, frozenset()) in others
    results = {torch.ops.aten.add.Tensor(*c.args).dtype for c in calls}
    assert torch.float32 in results  # the promoted result a kernel must reproduce


def test_promotion_remakes_out_in_the_result_dtype():
    base = Call(
        "add.out", (torch.arange(4), torch.arange(4)), {"out": torch.zeros(4, dtype=torch.int64)}
    )
    calls = values.promotion_calls([base], torch.int64)
    floats = [c for c in calls if c.args[1].dtype == torch.float32]
    assert floats and floats[0].kwargs["out"].dtype == torch.float32


@pytest.mark.parametrize(
    "overload,dtype,value_set,expected",
    [
        ("add.Tensor", torch.float32, "special", True),
        ("add.Tensor", torch.bool, "special", False),  # bool has no special values
        ("add.Tensor", torch.int64, "promotion", True),
        ("abs", torch.int64, "promotion", False),  # one operand: nothing to promote against
        ("cat", torch.float32, "promotion", True),  # a list of operands
        ("empty.memory_format", torch.float32, "special", False),  # no data operand
    ],
)
def test_value_sets_apply_by_schema(overload, dtype, value_set, expected):
    assert values.applies(overload, dtype, value_set) is expected


def test_special_values_catch_a_where_that_turns_nan_into_zero(monkeypatch):
    base = Call("where.self", (torch.tensor([True, False] * 8), torch.zeros(16), torch.ones(16)))
    calls = values.special_calls([base], torch.float32)

    def where_nan_to_zero(cond, a, b):
        return torch.where(cond, a, b).nan_to_num(nan=0.0, posinf=math.inf, neginf=-math.inf)

    out = _run(monkeypatch, "where.self", where_nan_to_zero, calls)
    assert out.failure is not None and out.failure.check == "values", out.failure
    assert "device 0.0 vs cpu nan" in out.failure.message


def test_promotion_catches_an_add_that_keeps_the_integer_dtype(monkeypatch):
    base = Call("add.Tensor", (torch.arange(6).reshape(2, 3), torch.arange(3)))
    calls = values.promotion_calls([base], torch.int64)

    def add_keeps_int(a, b, alpha=1):
        return torch.add(a, b, alpha=alpha).to(a.dtype)

    out = _run(monkeypatch, "add.Tensor", add_keeps_int, calls)
    assert out.failure is not None and out.failure.check == "dtype", out.failure


# ---- op specs with logic --------------------------------------------------------------------
def test_set_storage_offset_compares_the_view(monkeypatch):
    calls = spec_for("set_.source_Storage_storage_offset").samples(torch.float32)
    real = torch.ops.aten.set_.source_Storage_storage_offset
    assert _run(monkeypatch, calls[0].overload, real, calls).failure is None

    def ignores_offset(self, source, offset, size, stride=()):
        return real(self, source, 0, size, stride)

    out = _run(monkeypatch, calls[0].overload, ignores_offset, calls)
    assert out.failure is not None and out.failure.check == "values", out.failure


def test_integer_extremes_stay_out_of_counts():
    # special_laguerre_polynomial_l(x, n): n = INT_MAX would loop 2**31 times on CPU
    base = Call("special_laguerre_polynomial_l", (torch.arange(4), torch.arange(4)))
    (call,) = values.special_calls([base], torch.int64)
    assert int(call.args[1].max()) < 100
    (call,) = values.special_calls(
        [Call("add.Tensor", (torch.arange(4), torch.arange(4)))], torch.int64
    )
    assert torch.iinfo(torch.int64).max in call.args[0].tolist()


def test_an_empty_operand_never_becomes_a_cpu_operand():
    base = Call("eq.Tensor", (torch.zeros(0, 1, 3), torch.zeros(0, 10, 3)))
    for call in values.promotion_calls([base], torch.float32):
        assert not call.cpu_args or call.args[1].dim() == 0, call.signature()


def _troubled_run(call):
    """A CPU run (module-level: the forked child finds it by name) that crashes or hangs."""
    if call.args[0] == "crash":
        os.kill(os.getpid(), signal.SIGFPE)
    if call.args[0] == "hang":
        time.sleep(60)
    if call.args[0] == "raise":
        raise RuntimeError("CPU refuses: fine, errors are compared")


def test_calls_that_crash_or_hang_cpu_are_dropped():
    from conformance.samples import cpu_survivors

    calls = [Call("x", (tag,)) for tag in ("ok", "crash", "raise", "hang", "last")]
    kept = cpu_survivors.survivors(calls, _troubled_run, timeout=2.0)
    assert [c.args[0] for c in kept] == ["ok", "raise", "last"]


def test_special_values_of_lcm_do_not_crash_the_process():
    base = Call(
        "lcm", (torch.arange(1, 9, dtype=torch.int32), torch.arange(2, 10, dtype=torch.int32))
    )
    calls = values.special_calls([base], torch.int32)
    assert calls, "no special samples for lcm: nothing was tried"
    seen = {int(v) for call in calls for a in call.args for v in a.reshape(-1).tolist()}
    info = torch.iinfo(torch.int32)
    assert {info.min, info.max} <= seen, "the extremes are the point of the special samples"
    assert -1 not in seen  # INT_MIN / -1 traps (SIGFPE) in CPU's integer kernels
    for call in calls:
        result = torch.ops.aten.lcm(*call.args)  # would be SIGFPE in this process
        assert result.shape == call.args[0].shape


def test_promotion_never_moves_every_tensor_to_cpu():
    """remainder.Scalar_Tensor(scalar, tensor): a 0-dim CPU `other` would leave nothing on the
    device, so the call would run on CPU only and the case would test nothing."""
    base = Call("remainder.Scalar_Tensor", (2.5, torch.arange(1.0, 7.0).reshape(2, 3)))
    calls = values.promotion_calls([base], torch.float32)
    assert calls, "no promotion samples at all"
    for call in calls:
        on_device = [
            a
            for i, a in enumerate(call.args)
            if isinstance(a, torch.Tensor) and i not in call.cpu_args
        ]
        assert on_device, call.signature()


def test_the_value_sets_of_the_options_are_the_registered_ones():
    """options.py names them for --help without importing torch; samples/valuesets.py builds
    them: one list."""
    from conformance.harness.options import ORDINARY, VALUE_SETS
    from conformance.samples import valuesets

    assert list(VALUE_SETS) == [ORDINARY, *valuesets.names()]
