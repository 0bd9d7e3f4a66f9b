"""Issue 45: what a device does wrong is the device's finding, never "[harness] the suite failed
while checking this sample"; what cannot be judged on a device (a memory-format precondition
without storage, a sample CPU cannot build for the dtype) is not applicable, never a failure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conformance.engine import errorclass, evidence, oracles
from conformance.engine.checks import NotApplicable
from conformance.engine.compare import ErrorStats, Mismatch, compare_values
from conformance.engine.error_checks import check_errors
from conformance.engine.profile import Fact
from conformance.harness.casework import lacks_dtype

CHANNELS_LAST = RuntimeError("required rank 4 tensor to use channels_last format")


def _error_sample(expected: BaseException | None, actual: BaseException | None, storage: bool):
    profile = SimpleNamespace(storage=Fact(storage, "test"))
    return SimpleNamespace(
        expected=SimpleNamespace(exc=expected),
        actual=SimpleNamespace(exc=actual),
        strict_errors=False,
        placed=SimpleNamespace(layout="zero_dim"),
        backend=SimpleNamespace(profile=profile),
        notes=[],
    )


@pytest.mark.parametrize("device_raises", [None, RuntimeError("TorchScript interpreter failed")])
def test_a_memory_format_precondition_is_not_judged_without_storage(device_raises):
    with pytest.raises(NotApplicable, match="memory-format precondition"):
        check_errors(_error_sample(CHANNELS_LAST, device_raises, storage=False))


def test_a_memory_format_precondition_is_judged_where_storage_is_observable():
    with pytest.raises(Mismatch, match="the device returned normally"):
        check_errors(_error_sample(CHANNELS_LAST, None, storage=True))


def test_an_argument_error_is_still_judged_without_storage():
    shape = RuntimeError("stride should not be zero")
    assert not errorclass.about_memory_format(errorclass.classify(shape))
    with pytest.raises(Mismatch):
        check_errors(_error_sample(shape, None, storage=False))


def test_data_read_back_with_another_shape_is_a_shape_finding():
    """torch_xla's exponential_ and pixel_shuffle -sync: the tensor's shape was right, its data
    read back was not; isclose used to raise a broadcasting error, charged to the harness."""
    with pytest.raises(Mismatch) as info:
        compare_values("output", torch.zeros(5, 5, 64), torch.zeros(5, 5, 5), 1.0, ErrorStats())
    assert info.value.check == "shape"
    assert "read back with shape [5, 5, 64], cpu gives [5, 5, 5]" in info.value.message
    with pytest.raises(Mismatch) as info:
        oracles.compare_random("output", torch.rand(64), torch.rand(5), 1.0, ErrorStats())
    assert info.value.check == "shape"


def test_sparse_results_are_measured_dense():
    """_embedding_bag_backward(sparse=True) in -arguments: CPU's sparse kernels lack isfinite."""
    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    errors = evidence.element_errors(dense.to_sparse(), dense + 0.25)
    assert float(errors.max()) == pytest.approx(0.25) and errors.shape == dense.shape


def test_cpu_lacking_the_dtype_while_building_samples_is_told_apart():
    assert lacks_dtype(NotImplementedError("\"slow_conv2d_cpu\" not implemented for 'Bool'"))
    assert not lacks_dtype(TypeError("sample_inputs_foo() got an unexpected keyword"))


def _placed(*args, **kwargs):
    def materialize(device):
        assert device == "cpu"
        return SimpleNamespace(
            args=tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args),
            kwargs=dict(kwargs),
        )

    return SimpleNamespace(materialize=materialize)


def test_a_nan_of_cpus_vectorised_kernel_is_recomputed_one_element_at_a_time():
    """torch's vectorised float32 fmod gives nan at 3.4e38 where the element alone (and float64)
    gives a number: the reference takes the one-element value, with a torch-bug note."""
    from conformance.engine.checks import Outcome
    from conformance.engine.unvectorised import fix_vectorised_nans

    x = torch.full((64,), 3.4e38)
    result = torch.fmod(x, 0.7)
    if not bool(result.isnan().all()):
        pytest.skip("this torch's vectorised fmod no longer gives nan here")
    alone = float(torch.fmod(x[:1], 0.7))
    how = fix_vectorised_nans(
        "fmod.Scalar", torch.ops.aten.fmod.Scalar, _placed(x, 0.7), Outcome(result)
    )
    assert how is not None and "64 element(s)" in how, how
    assert torch.equal(result, torch.full((64,), alone))
    # a NaN the one-element call gives too is CPU's answer: nothing replaced
    nan = torch.full((4,), float("nan"))
    kept = torch.fmod(nan, 0.7)
    assert (
        fix_vectorised_nans(
            "fmod.Scalar", torch.ops.aten.fmod.Scalar, _placed(nan, 0.7), Outcome(kept)
        )
        is None
    )
    # not a pointwise op: no claim
    assert (
        fix_vectorised_nans("cumsum", torch.ops.aten.cumsum.default, _placed(x, 0), Outcome(result))
        is None
    )


def test_compile_and_execute_time_are_the_runtimes_own_metrics():
    """Issues 45, 61: the time a lazy runtime spends compiling and running graphs, from its
    CompileTime and ExecuteTime metrics (total ns), told apart from the case's time; a runtime
    without the metrics: not measured."""
    from conformance.engine.lazy import LazyRuntime

    class Metrics:
        def metric_data(self, name):
            return {"CompileTime": (3, 2.5e9, ()), "ExecuteTime": (7, 0.5e9, ())}.get(name)

    xla_like = LazyRuntime("x", lambda: None, Metrics(), lambda d, p: None, "save")
    assert xla_like.compile_seconds() == pytest.approx(2.5)
    assert xla_like.execute_seconds() == pytest.approx(0.5)
    assert "compile and execute time from 'CompileTime' and 'ExecuteTime'" in xla_like.describe()
    lazy_like = LazyRuntime("y", lambda: None, SimpleNamespace(), lambda d, p: None, "save")
    assert lazy_like.compile_seconds() is None
    assert lazy_like.execute_seconds() is None
    assert "compile and execute time not measured" in lazy_like.describe()


def test_a_backward_that_fails_where_its_graph_runs_is_a_grad_finding(monkeypatch):
    """torch_xla: cumprod's and svd's backward fail to lower only when the gradient is read
    (its graph runs then); that was "[harness] the suite failed while checking this sample"."""
    from conformance.engine import grad_compare, transfer

    def lowering_fails(t):
        raise RuntimeError("Error while lowering: [] aten::cumprod_backward")

    monkeypatch.setattr(transfer, "has_storage", lambda t: False)
    monkeypatch.setattr(transfer, "read_back", lowering_fails)
    with pytest.raises(Mismatch) as info:
        grad_compare._settled("grad of self (grad_output contiguous)", torch.ones(3))
    assert info.value.check == "grad"
    assert "Error while lowering" in info.value.message
    assert "grad of self (grad_output contiguous), when its graph ran" in info.value.message
