"""Issue 45: what a device does wrong is the device's finding, never "[harness] the suite failed
while checking this sample"; what cannot be judged on a device (a memory-format precondition
without storage, a sample CPU cannot build for the dtype) is not applicable, never a failure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conformance.engine import errorclass, evidence, oracles
from conformance.engine.checks import NotApplicable, check_errors
from conformance.engine.compare import ErrorStats, Mismatch, compare_values
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
    assert evidence._distance(dense.to_sparse(), dense + 0.25) == pytest.approx(0.25)


def test_cpu_lacking_the_dtype_while_building_samples_is_told_apart():
    assert lacks_dtype(NotImplementedError("\"slow_conv2d_cpu\" not implemented for 'Bool'"))
    assert not lacks_dtype(TypeError("sample_inputs_foo() got an unexpected keyword"))
