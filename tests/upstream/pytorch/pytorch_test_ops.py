"""TestCommon's device-vs-CPU, device-vs-numpy and device-vs-itself tests, written in PyTorch's
style from conformance/upstream/models.py's rows (test/test_ops.py): test_compare_cpu,
test_numpy_ref, test_noncontiguous_samples and test_variant_consistency_eager (forward only).
Run by tests/upstream/ in a child pytest on the backend $UPSTREAM_BACKEND, for the OpInfos
$UPSTREAM_OPS."""

import unittest

import torch
from _select import listed
from torch.testing._internal.common_device_type import (
    OpDTypes,
    instantiate_device_type_tests,
    onlyNativeDeviceTypesAnd,
    onlyOn,
    ops,
)
from torch.testing._internal.common_utils import (
    TestCase,
    clone_input_helper,
    run_tests,
    set_default_dtype,
    suppress_warnings,
)


def _to_cpu(arg):
    return arg.to("cpu") if isinstance(arg, torch.Tensor) else arg


class TestCommon(TestCase):
    exact_dtype = True

    @onlyOn(["cuda", "xpu"])
    @suppress_warnings
    @ops(listed("no_numpy_ref"), dtypes=OpDTypes.any_common_cpu_cuda_one)
    def test_compare_cpu(self, device, dtype, op):
        for sample in op.reference_inputs(device, dtype):
            cpu_sample = sample.transform(_to_cpu)
            device_results = op(sample.input, *sample.args, **sample.kwargs)
            cpu_results = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            device_results = sample.output_process_fn_grad(device_results)
            cpu_results = cpu_sample.output_process_fn_grad(cpu_results)
            tol = 1e-3 if dtype.is_floating_point or dtype.is_complex else 0
            self.assertEqual(device_results, cpu_results, atol=tol, rtol=tol)

    @onlyNativeDeviceTypesAnd(["hpu"])
    @suppress_warnings
    @ops(listed("ref_test_ops"), allowed_dtypes=(torch.float64, torch.long, torch.complex128))
    def test_numpy_ref(self, device, dtype, op):
        if "cpu" in device:
            raise unittest.SkipTest("the numpy reference is compared on accelerators")
        with set_default_dtype(torch.double):
            for sample in op.reference_inputs(device, dtype):
                self.compare_with_reference(
                    op, op.ref, sample, exact_dtype=(dtype is not torch.long)
                )

    @onlyNativeDeviceTypesAnd(["hpu"])
    @suppress_warnings
    @ops(listed("op_db"), allowed_dtypes=(torch.float32, torch.long, torch.complex64))
    def test_noncontiguous_samples(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            expected = sample.output_process_fn_grad(expected)
            ncs = sample.noncontiguous()
            actual = op(ncs.input, *ncs.args, **ncs.kwargs)
            actual = ncs.output_process_fn_grad(actual)
            self.assertEqual(actual, expected)

    @suppress_warnings
    @ops(listed("op_db"), dtypes=OpDTypes.supported,
         allowed_dtypes=(torch.float32, torch.complex64))  # fmt: skip
    def test_variant_consistency_eager(self, device, dtype, op):
        variants = [v for v in (op.method_variant, op.inplace_variant) if v is not None]
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            tensor = sample.input if isinstance(sample.input, torch.Tensor) else sample.input[0]
            skip_inplace = isinstance(expected, torch.Tensor) and expected.dtype is not tensor.dtype
            for variant in variants:
                inplace = variant is op.inplace_variant
                if inplace and (skip_inplace or sample.broadcasts_input):
                    continue
                cloned = clone_input_helper(sample.input) if inplace else sample.input
                storage = (cloned if isinstance(cloned, torch.Tensor) else cloned[0]).data_ptr()
                actual = variant(cloned, *sample.args, **sample.kwargs)
                self.assertEqual(expected, actual)
                if inplace:  # the result is the input, written in place
                    self.assertEqual(storage, actual.data_ptr(), atol=0, rtol=0)


instantiate_device_type_tests(TestCommon, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
