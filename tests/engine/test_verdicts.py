"""Verdicts that can be trusted: each check can fire, and correct kernels are not blamed.

CPU plays the device; the 'device' op is a wrapper with the same schema that misbehaves in one
way per test (as in test_runner.py). Every test here fails if the check it names is removed
(tests/meta/ablate_checks.py shows which)."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.calls import Call
from conformance.samples import dedupe
from tests.engine.fake_kernels import run_with_kernel

run = run_with_kernel


LONG = torch.arange(6).reshape(2, 3)


def _not_implemented(*args, **kwargs):
    raise NotImplementedError("Could not run 'aten::exp_' with arguments from the 'NPU' backend")


# ---- error parity by class; not implemented is unsupported, never a pass ----------------------
def test_not_implemented_where_cpu_raises_is_unsupported_not_a_pass(monkeypatch):
    out = run(monkeypatch, "exp_", _not_implemented, [Call("exp_", (LONG,))])
    assert out.failure is None and out.samples == 0
    assert out.unsupported and "NotImplementedError" in out.unsupported
    assert "cpu raised RuntimeError [dtype]" in out.unsupported
    assert not out.unsupported_cpu_computes  # CPU lacks it too: not a failing verdict


def test_not_implemented_where_cpu_computes_is_unsupported(monkeypatch):
    out = run(monkeypatch, "exp", _not_implemented, [Call("exp", (torch.ones(3),))])
    assert out.failure is None and out.unsupported and "where cpu computes" in out.unsupported
    assert out.unsupported_cpu_computes  # fails the case unless the manifest declares it


def test_error_of_another_class_fails(monkeypatch):
    def wrong(a):
        raise RuntimeError("exp_: expected a tensor of at least 2 dimensions")

    out = run(monkeypatch, "exp_", wrong, [Call("exp_", (LONG,))])
    assert out.failure.check == "error" and "a different class" in out.failure.message


def test_same_class_reworded_passes_as_error_parity(monkeypatch):
    def reworded(a):
        raise RuntimeError("exp_: result dtype Float cannot be cast to Long")

    out = run(monkeypatch, "exp_", reworded, [Call("exp_", (LONG,))])
    assert out.failure is None and out.samples == 1 and out.errors_only


def test_an_opaque_device_error_does_not_match_cpus_dtype_error(monkeypatch):
    """exp_ on int64: CPU raises a dtype error; "ENPU runtime error 0x7" says nothing of that
    (its class is 'other'): it fails, and the message says what to raise (issue 20)."""

    def opaque(a):
        raise RuntimeError("ENPU runtime error 0x7")

    out = run(monkeypatch, "exp_", opaque, [Call("exp_", (LONG,))])
    assert out.failure is not None and out.failure.check == "error"
    assert "[other]" in out.failure.message and "raise RuntimeError" in out.failure.message


@pytest.mark.parametrize(
    "text",
    [
        "Check failed: dtype == at::kFloat (Long vs. Float)",
        "Error while lowering: [] xla::cast, xla_shape=s64[5]{0}, dtype=Long, stype=Int",
    ],
)
def test_an_internal_check_where_cpu_refuses_too_is_both_refused_with_a_note(monkeypatch, text):
    """torch_xla stops an invalid input at its own CHECK or fails to lower it: where what it
    states names CPU's cause (a dtype, for exp_ of int64), both sides refused for one reason:
    no parity verdict, a message-quality note instead (issue 45). Where CPU computes, the
    internal check fails."""

    def xla_check(a):
        raise RuntimeError(text)

    with monkeypatch.context() as patch:
        out = run(patch, "exp_", xla_check, [Call("exp_", (LONG,))])
    assert out.failure is None and out.errors_only
    assert out.notes and out.notes[0].startswith("message quality: the device stopped at an")
    with monkeypatch.context() as patch:
        computes = run(patch, "exp", xla_check, [Call("exp", (torch.ones(3),))])
    assert computes.failure is not None and "cpu returned normally" in computes.failure.message


@pytest.mark.parametrize(
    "text",
    [
        "Check failed: the command queue was destroyed",
        "Check failed: total_element_count == 6 (4 vs. 6)",
        "lowering of aten::exp_ failed: out of device memory",
    ],
)
def test_an_internal_check_naming_another_cause_or_none_is_no_refusal(monkeypatch, text):
    """Issue 56: any "Check failed" or failed lowering passed as "both refused" against any
    CPU error: a runtime failure ("the command queue was destroyed") or a shape check where CPU
    refuses a dtype is not the same refusal; it fails as an error of another class."""

    def failing(a):
        raise RuntimeError(text)

    out = run(monkeypatch, "exp_", failing, [Call("exp_", (LONG,))])
    assert out.failure is not None and out.failure.check == "error", out
    assert "(a different class)" in out.failure.message and "[internal]" in out.failure.message


def test_two_opaque_errors_of_the_same_type_match(monkeypatch):
    def cpu_opaque(a):
        raise RuntimeError("something went wrong 0x1")

    def dev_opaque(a):
        raise RuntimeError("ENPU runtime error 0x7")

    calls = [Call("exp", (torch.ones(3),))]
    out = run(monkeypatch, "exp", dev_opaque, calls, reference=cpu_opaque)
    assert out.failure is None and out.errors_only


def _needs_contiguous(a):
    if not a.is_contiguous():
        raise RuntimeError("Expected X.is_contiguous(memory_format) to be true, but got false.")
    return torch.ops.aten.exp.default(a)


def test_cpu_layout_precondition_is_not_applicable_unless_strict(monkeypatch):
    calls = [Call("exp", (torch.rand(3, 4),))]
    out = run(monkeypatch, "exp", None, calls, "transposed", reference=_needs_contiguous)
    assert out.failure is None and out.samples == 0
    assert out.skip_reason and "not applicable to the transposed layout" in out.skip_reason
    strict = run(monkeypatch, "exp", None, calls, "transposed", True, reference=_needs_contiguous)
    assert strict.failure.check == "error" and "returned normally" in strict.failure.message


# ---- identity below autograd -------------------------------------------------------------------
def test_inplace_that_writes_self_but_returns_a_new_tensor(monkeypatch):
    def writes_and_copies(a, b, alpha=1):
        a.add_(b, alpha=alpha)
        return a.clone()

    calls = [Call("add_.Tensor", (torch.ones(3, 4), torch.ones(4)))]
    out = run(monkeypatch, "add_.Tensor", writes_and_copies, calls)
    assert out.failure.check == "inplace"
    assert "returned a new tensor instead of the self it wrote" in out.failure.message


def test_out_that_writes_out_but_returns_a_new_tensor(monkeypatch):
    def writes_and_copies(a, b, alpha=1, out=None):
        torch.add(a, b, alpha=alpha, out=out)
        return out.clone()

    calls = [Call("add.out", (torch.ones(3, 4), torch.ones(4)), {"out": torch.empty(3, 4)})]
    out = run(monkeypatch, "add.out", writes_and_copies, calls)
    assert out.failure.check == "out" and "instead of the out= tensor" in out.failure.message


def test_a_kernel_that_raises_when_called_below_autograd_fails(monkeypatch):
    """The identity check calls the kernel a second time below autograd; an error there was
    swallowed (issue 20)."""
    calls_seen = []

    def raises_second_time(a, b, alpha=1):
        calls_seen.append(1)
        if len(calls_seen) % 2 == 0:
            raise RuntimeError("ENPU stream error")
        return a.add_(b, alpha=alpha)

    calls = [Call("add_.Tensor", (torch.ones(3, 4), torch.ones(4)))]
    out = run(monkeypatch, "add_.Tensor", raises_second_time, calls)
    assert out.failure is not None and out.failure.check == "error"
    assert (
        "called below autograd" in out.failure.message
        and "ENPU stream error" in out.failure.message
    )


@pytest.mark.parametrize("wrong", [3, True], ids=["int-for-float", "bool-for-int"])
def test_a_scalar_of_another_type_fails(monkeypatch, wrong):
    """`3.0` vs `3` and `1` vs `True` compared equal (issue 20)."""
    value = 3.0 if isinstance(wrong, int) and not isinstance(wrong, bool) else 1
    dtype = torch.float64 if isinstance(value, float) else torch.int64
    calls = [Call("_local_scalar_dense", (torch.tensor(value, dtype=dtype),))]
    assert run(monkeypatch, "_local_scalar_dense", None, calls).failure is None
    out = run(monkeypatch, "_local_scalar_dense", lambda a: wrong, calls)
    assert out.failure is not None and out.failure.check == "dtype", out.failure
    assert type(wrong).__name__ in out.failure.message


# ---- list-returning views; where a view maps ----------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        Call("unbind.int", (torch.rand(3, 4), 0)),
        Call("split.Tensor", (torch.rand(6, 4), 2)),
        Call("split_with_sizes", (torch.rand(6, 4), [1, 2, 3])),
    ],
    ids=lambda c: c.overload,
)
def test_list_returning_views_pass_cpu_against_itself(monkeypatch, call):
    for layout in ("contiguous", "transposed", "offset"):
        out = run(monkeypatch, call.overload, None, [call], layout)
        assert out.failure is None, (layout, out.failure and out.failure.message)


def test_list_view_returning_copies_fails(monkeypatch):
    real = torch.ops.aten.unbind.int
    out = run(
        monkeypatch,
        "unbind.int",
        lambda a, dim=0: [t.clone() for t in real(a, dim)],
        [Call("unbind.int", (torch.rand(3, 4), 0))],
    )
    assert out.failure.check == "view" and "does not share storage" in out.failure.message


def test_view_that_maps_onto_other_elements_fails_even_with_equal_values(monkeypatch):
    sevens = torch.full((3, 4), 7.0)  # the gap value of the offset layout: values cannot tell

    def shifted(a, size):
        return a.as_strided(size, (4, 1), a.storage_offset() - 1)

    out = run(monkeypatch, "view", shifted, [Call("view", (sevens, [3, 4]))], "offset")
    assert out.failure.check == "view" and "does not map onto" in out.failure.message


# ---- resize_ keeps the old contents --------------------------------------------------------------
def test_resize_that_loses_the_old_contents_fails(monkeypatch):
    def losing(a, size, memory_format=None):
        a.resize_(size)
        a.zero_()
        return a

    calls = [Call("resize_", (torch.arange(6.0) + 1, [12]))]
    spec = {"check_values": False, "keeps_old_contents": True}
    assert run(monkeypatch, "resize_", None, calls, **spec).failure is None
    out = run(monkeypatch, "resize_", losing, calls, **spec)
    assert out.failure.check == "values" and "lost the old contents of self" in out.failure.message


# ---- CPU against itself across layouts -----------------------------------------------------------
def _layout_dependent_exp(a):
    r = torch.ops.aten.exp.default(a)
    return r if a.is_contiguous() else r + 1  # a CPU kernel that is wrong on strided inputs


def test_cpu_disagreeing_with_itself_is_a_torch_bug_not_a_device_failure(monkeypatch):
    calls = [Call("exp", (torch.rand(3, 4),))]
    out = run(monkeypatch, "exp", None, calls, "transposed", reference=_layout_dependent_exp)
    assert out.failure is None and out.torch_bugs
    assert "cpu disagrees with itself" in out.torch_bugs[0]
    # a device that reproduces CPU's layout bug (as cpu_fallback does) is not blamed either
    same = run(
        monkeypatch,
        "exp",
        _layout_dependent_exp,
        calls,
        "transposed",
        reference=_layout_dependent_exp,
    )
    assert same.failure is None and "layout-dependent result" in same.torch_bugs[0]
    # a device wrong in its own way still fails, judged against the layout-free result
    wrong = run(
        monkeypatch,
        "exp",
        lambda a: torch.exp(a) * 3,
        calls,
        "transposed",
        reference=_layout_dependent_exp,
    )
    assert wrong.failure is not None and wrong.failure.check == "values"


@pytest.mark.parametrize("path", ["native", "fallback"])
def test_a_third_result_is_the_devices_own_failure_not_a_torch_bug(monkeypatch, path):
    """CPU's narrow_copy.out into a sliced out= disagrees with itself on torch 2.13; a device
    off by 100 matches neither CPU result: it fails (also through cpu_fallback, issue 20)."""
    real = torch.ops.aten.narrow_copy.out

    def plus_100(x, dim, start, length, *, out):
        real(x, dim, start, length, out=out)
        return out.add_(100)

    x = torch.rand(4, 6)
    calls = [Call("narrow_copy.out", (x, 1, 1, 3), {"out": torch.empty(4, 3)})]
    fine = run(monkeypatch, "narrow_copy.out", None, calls, "sliced", path=path)
    assert fine.failure is None
    out = run(monkeypatch, "narrow_copy.out", plus_100, calls, "sliced", path=path)
    assert out.failure is not None and out.failure.check == "values", out.torch_bugs
    assert "matches neither of cpu's two results" in out.failure.message
    assert "against cpu on this layout" in out.failure.message and not out.torch_bugs


def test_explicit_stride_ops_are_not_torch_bugs(monkeypatch):
    calls = [Call("as_strided", (torch.rand(3, 3), [2, 2], [1, 2], 0))]
    out = run(monkeypatch, "as_strided", None, calls, "transposed")
    assert out.failure is None and not out.torch_bugs


# ---- random ops, uninitialised outputs, scalars ------------------------------------------------
def _draw_other_stream(fn):
    def draw(*args, **kwargs):
        torch.manual_seed(99)
        return fn(*args, **kwargs)

    return draw


def test_random_op_with_another_stream_passes_on_properties(monkeypatch):
    calls = [Call("normal_", (torch.empty(64, 64), 2.0, 3.0))]
    real = torch.ops.aten.normal_.default
    out = run(monkeypatch, "normal_", _draw_other_stream(real), calls)
    assert out.failure is None, out.failure and out.failure.message


def test_random_op_with_the_wrong_distribution_fails(monkeypatch):
    calls = [Call("normal_", (torch.empty(64, 64), 2.0, 3.0))]

    def uniform(a, mean=0.0, std=1.0, generator=None):
        return a.uniform_(mean - std, mean + std)

    out = run(monkeypatch, "normal_", uniform, calls)
    assert out.failure.check == "values" and "random draws" in out.failure.message
    assert "Kolmogorov-Smirnov" in out.failure.message


def test_uninitialised_output_compares_metadata_only(monkeypatch):
    calls = [Call("empty_like", (torch.rand(3, 4),))]
    garbage = run(
        monkeypatch, "empty_like", lambda a, **k: torch.full_like(a, 5.0), calls, check_values=False
    )
    assert garbage.failure is None
    wrong = run(
        monkeypatch,
        "empty_like",
        lambda a, **k: torch.empty(3, 4, dtype=torch.float64),
        calls,
        check_values=False,
    )
    assert wrong.failure.check == "dtype"


def test_scalar_tolerance_follows_the_dtype(monkeypatch):
    calls = [Call("_local_scalar_dense", (torch.tensor(1.0, dtype=torch.float64),))]
    off = run(monkeypatch, "_local_scalar_dense", lambda a: 1.0 + 1e-6, calls)
    assert off.failure.check == "values"  # a fixed 1e-5 relative tolerance let this through
    half = [Call("_local_scalar_dense", (torch.tensor(1.0, dtype=torch.float16),))]
    assert run(monkeypatch, "_local_scalar_dense", lambda a: 1.0 + 5e-4, half).failure is None


# ---- samples ----------------------------------------------------------------------------------
def test_dedupe_keeps_every_copy_direction():
    src, dst = torch.ones(2, 3), torch.zeros(2, 3)
    calls = [
        Call("_copy_from", (src, dst)),
        Call("_copy_from", (src, dst), cpu_args=frozenset({1})),
        Call("_copy_from", (src, dst), cpu_args=frozenset({0})),
    ]
    assert len(dedupe(calls)) == 3
