"""The runner's checks, driven with CPU as the 'device' and deliberately wrong kernels.

The CPU reference is the real aten op; the 'device' op is a wrapper with the same schema whose
behaviour we break in one way per test. Each check must fail with its own name and message.
"""

import types

import pytest
import torch

from conformance.engine import runner
from conformance.engine.backend import Backend
from conformance.engine.calls import Call
from conformance.ops import OpSpec
from conformance.samples import calls_for
from tests.engine.fake_kernels import run_with_kernel

_run = run_with_kernel


ADD = [Call("add.Tensor", (torch.arange(12.0).reshape(3, 4), torch.ones(4)))]
ADD_ = [Call("add_.Tensor", (torch.arange(12.0).reshape(3, 4), torch.ones(4)))]


@pytest.mark.parametrize(
    "layout",
    [
        "contiguous",
        "transposed",
        "sliced",
        "offset",
        "expanded",
        "noncontiguous",
        "zero_size",
        "zero_dim",
    ],
)
def test_cpu_against_itself_passes(monkeypatch, layout):
    out = _run(monkeypatch, "add_.Tensor", None, ADD_, layout)
    assert out.failure is None and out.samples == 1


def test_opinfo_samples_cpu_against_itself_pass(monkeypatch, tmp_path):
    for overload in ["masked_fill_.Scalar", "add.out", "sum.dim_IntList", "cat", "view"]:
        calls = calls_for(overload, torch.float32, str(tmp_path))
        assert calls, overload
        for layout in ["contiguous", "transposed", "sliced", "expanded"]:
            out = _run(monkeypatch, overload, None, calls, layout)
            assert out.failure is None, (overload, layout, out.failure and out.failure.message)


def test_wrong_values(monkeypatch):
    out = _run(monkeypatch, "add.Tensor", lambda a, b, alpha=1: torch.add(a, b) + (a == 5), ADD)
    assert out.failure.check == "values" and "1/12 elements differ" in out.failure.message


def test_wrong_dtype(monkeypatch):
    out = _run(monkeypatch, "add.Tensor", lambda a, b, alpha=1: torch.add(a, b).double(), ADD)
    assert out.failure.check == "dtype"


def test_wrong_strides(monkeypatch):
    calls = [Call("add.Tensor", (torch.ones(3, 4), torch.ones(3, 4)))]
    out = _run(
        monkeypatch,
        "add.Tensor",
        lambda a, b, alpha=1: torch.add(a, b).contiguous(),
        calls,
        "transposed",
    )
    assert out.failure.check == "strides"


def test_inplace_returning_a_new_tensor(monkeypatch):
    out = _run(monkeypatch, "add_.Tensor", lambda a, b, alpha=1: a + b, ADD_)
    assert out.failure.check in ("inplace", "values")
    assert "instead of the self" in out.failure.message or "differ" in out.failure.message


def test_inplace_that_returns_self_but_forgets_the_write(monkeypatch):
    def lazy(a, b, alpha=1):
        return a

    out = _run(monkeypatch, "add_.Tensor", lazy, ADD_)
    assert out.failure.check in ("values", "inplace")


def test_writing_outside_the_view_is_caught(monkeypatch):
    def spill(a, b, alpha=1):
        torch.add(a, b, out=a)
        a.as_strided((1,), (1,), a.storage_offset() + a.numel()).fill_(99)  # one past the view
        return a

    out = _run(monkeypatch, "add_.Tensor", spill, ADD_, "offset")
    assert out.failure.check == "inputs" and "outside/around the view" in out.failure.message


def test_modified_input(monkeypatch):
    def clobber(a, b, alpha=1):
        r = torch.add(a, b)
        b.zero_()
        return r

    out = _run(monkeypatch, "add.Tensor", clobber, ADD)
    assert out.failure.check == "inputs" and "'other' was modified" in out.failure.message


@pytest.mark.parametrize(("layout", "first"), [("contiguous", 0), ("noncontiguous", 1)])
def test_a_modified_input_is_found_in_its_shape_and_in_a_flat_buffer(monkeypatch, layout, first):
    """A 2-D input that is its whole buffer is read back in its shape and compared with its
    pristine values in that shape; one with gaps around it is read as a flat buffer. Either
    way the first change is named by its flat index in the buffer."""

    def clobber(a, b, alpha=1):
        r = torch.add(a, b)
        b.fill_(5.0)
        return r

    call = Call("add.Tensor", (torch.arange(12.0).reshape(3, 4), torch.ones(3, 4)))
    out = _run(monkeypatch, "add.Tensor", clobber, [call], layout)
    assert out.failure.check == "inputs", out.failure
    assert (
        f"'other' was modified (12 elements of its buffer changed, first at flat index {first})"
        in (out.failure.message)
    )


def test_output_aliasing_an_input(monkeypatch):
    out = _run(monkeypatch, "add.Tensor", lambda a, b, alpha=1: a.add_(b), ADD)
    assert out.failure.check in ("aliasing", "inputs")


def test_error_parity(monkeypatch):
    calls = [Call("add.Tensor", (torch.ones(3, 4), torch.ones(5)))]  # cpu raises
    out = _run(monkeypatch, "add.Tensor", lambda a, b, alpha=1: torch.zeros(3, 4), calls)
    assert out.failure.check == "error" and "cpu raised RuntimeError" in out.failure.message
    out = _run(monkeypatch, "add.Tensor", lambda a, b, alpha=1: 1 / 0, ADD)
    assert out.failure.check == "error" and "device raised ZeroDivisionError" in out.failure.message


def test_view_must_share_storage(monkeypatch):
    calls = [Call("view", (torch.arange(12.0), [3, 4]))]
    out = _run(monkeypatch, "view", lambda a, size: a.clone().view(size), calls)
    assert out.failure.check == "view"


def test_skip_when_layout_applies_to_no_sample(monkeypatch):
    calls = [Call("add.Tensor", (torch.ones(4), torch.ones(4)))]
    out = _run(monkeypatch, "add.Tensor", None, calls, "channels_last")
    assert out.skip_reason and "channels_last" in out.skip_reason


# ---- path: the fallback path really went through cpu_fallback ------------------------------------
class _Counting(types.ModuleType):
    """A backend module whose fallback routing only pretends, or counts calls it never routes."""

    def __init__(self, counts_native: bool) -> None:
        super().__init__("counting")
        self.routes: list[str] = []
        self.counts: dict[str, int] = {}
        self.counts_native = counts_native

    def set_fallback_routes(self, routes):
        self.routes = list(routes)

    def get_fallback_routes(self):
        return list(self.routes)

    def fallback_counts(self):
        if self.counts_native:  # every call counted as a fallback call, routed or not
            self.counts["abs"] = self.counts.get("abs", 0) + 1
        return dict(self.counts)


@pytest.mark.parametrize(
    ("path", "counts_native", "message"),
    [
        ("fallback", False, "abs did not go through cpu_fallback (fallback_counts did not move)"),
        ("native", True, "the native path of abs went through cpu_fallback"),
    ],
)
def test_path_check_proves_which_path_ran(path, counts_native, message):
    backend = Backend("counting", _Counting(counts_native), "cpu")
    calls = [Call("abs", (torch.randn(3, 4),))]
    out = runner.run_case(backend, "abs", OpSpec("abs"), calls, "contiguous", path, route=True)
    assert out.failure is not None and out.failure.check == "path", out.failure
    assert message in out.failure.message


def test_a_lazy_device_failing_when_its_result_is_read_is_its_error(monkeypatch):
    """torch_xla raises some errors only when a result's pending graph runs, at the read: that is
    the device's `error` finding, never "[harness] the suite failed while checking"."""
    from conformance.engine import checks
    from conformance.engine.transfer import LazyRunError

    text = "RuntimeError: Executable expected parameter 0 of size 1000 but got buffer of size 500"

    def read_fails(t: torch.Tensor, storage: bool = False) -> torch.Tensor:
        raise LazyRunError(text)

    monkeypatch.setattr(checks, "read_back", read_fails)  # the sample's one read (Sample.host)
    out = _run(monkeypatch, "add.Tensor", None, ADD)
    assert out.failure.check == "error", out.failure.message
    assert "raised when a result it returned was read back" in out.failure.message
    assert text in out.failure.message


def test_an_empty_result_of_a_device_with_storage_is_read_without_calling_the_device(
    monkeypatch,
):
    """An empty tensor's storage holds no bytes: on a device whose tensors have observable
    storage its read-back is made on CPU (shape, strides, dtype), not by the backend's own
    `.cpu()`, which the harness must not depend on; a lazy device's (no storage) still goes
    through `.cpu()`, where its pending graph may raise."""
    from conformance.engine import transfer

    def device_copy(t: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the backend's .cpu() was called")

    monkeypatch.setattr(transfer, "lazy_values", device_copy)
    monkeypatch.setattr(torch.Tensor, "is_cpu", property(lambda t: False))  # "on a device"
    empty = torch.empty_strided((0, 3), (1, 4), dtype=torch.float16)
    back = transfer.read_back(empty, storage=True)
    assert (back.shape, back.stride(), back.dtype) == ((0, 3), (1, 4), torch.float16)
    with pytest.raises(AssertionError, match=r"\.cpu\(\) was called"):
        transfer.read_back(empty)  # no storage to observe: the device's own copy


def test_a_cpu_argument_returned_wrapped_by_functionalization_is_read_as_itself():
    """torch_xla's `_copy_from` into a CPU dst returns dst wrapped as a functional tensor; plain
    CPU ops refuse to mix with it (an INTERNAL ASSERT), so the harness reads and names it as dst."""
    from conformance.engine.transfer import plain, read_back, same_tensor

    dst = torch.arange(6.0).reshape(2, 3)
    wrapped = torch._to_functional_tensor(dst)
    assert plain(wrapped) is dst and same_tensor(wrapped, dst)
    assert not same_tensor(wrapped, dst.clone()) and plain(dst) is dst
    back = read_back(wrapped)
    assert not torch._is_functional_tensor(back) and torch.equal(back, dst)
    assert bool(((back == 0) | (dst > 0)).all())  # mixes with plain CPU tensors
