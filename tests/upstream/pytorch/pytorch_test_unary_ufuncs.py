"""TestUnaryUfuncs' reference numerics, written in PyTorch's style from
conformance/upstream/models.py's rows (test/test_unary_ufuncs.py): the device against the
OpInfo's numpy reference on the test's own generated tensors (normal, small, large, extremal)."""

import numpy as np
import torch
from _select import listed
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import (
    TestCase,
    numpy_to_torch_dtype_dict,
    run_tests,
    suppress_warnings,
)
from torch.testing._internal.opinfo.core import (
    generate_elementwise_unary_extremal_value_tensors,
    generate_elementwise_unary_large_value_tensors,
    generate_elementwise_unary_small_value_tensors,
    generate_elementwise_unary_tensors,
)

reference_filtered_ops = listed("unary_ufuncs_with_ref")


class TestUnaryUfuncs(TestCase):
    exact_dtype = True

    def _test_reference_numerics(self, dtype, op, tensors):
        for sample in tensors:
            t = sample.input
            torch_kwargs, numpy_kwargs = op.sample_kwargs(t.device, dtype, t)
            if dtype is torch.bfloat16:
                a = t.cpu().to(torch.float32).numpy()
            elif dtype is torch.complex32:
                a = t.cpu().to(torch.complex64).numpy()
            else:
                a = t.cpu().numpy()
            actual = op(t, **torch_kwargs)
            expected = np.asarray(op.ref(a, **numpy_kwargs))
            reference_dtype = numpy_to_torch_dtype_dict[expected.dtype.type]
            # numpy computes half types in float32 (complex32 in complex64)
            exact_dtype = torch.can_cast(reference_dtype, dtype) and dtype not in (
                torch.float16, torch.bfloat16, torch.complex32
            )  # fmt: skip
            if dtype in (torch.uint8, torch.int8, torch.bool):
                tol = {"rtol": 1e-3, "atol": 1e-2}
            elif dtype is torch.bfloat16:
                tol = {"rtol": 16e-3, "atol": 1e-5}
            elif dtype is torch.half:
                tol = {"rtol": 1.2e-03, "atol": 1e-03}
            else:
                tol = {}
            if exact_dtype:
                self.assertEqual(reference_dtype, actual.dtype)
            self.assertEqual(
                actual, torch.from_numpy(expected).to(actual.dtype), exact_device=False, **tol
            )

    @suppress_warnings
    @ops(reference_filtered_ops)
    def test_reference_numerics_normal(self, device, dtype, op):
        tensors = generate_elementwise_unary_tensors(
            op, device=device, dtype=dtype, requires_grad=False
        )
        self._test_reference_numerics(dtype, op, tensors)

    @suppress_warnings
    @ops(reference_filtered_ops)
    def test_reference_numerics_small(self, device, dtype, op):
        if dtype is torch.bool:
            raise self.skipTest("bool has no small values")
        tensors = generate_elementwise_unary_small_value_tensors(
            op, device=device, dtype=dtype, requires_grad=False
        )
        self._test_reference_numerics(dtype, op, tensors)

    @suppress_warnings
    @ops(reference_filtered_ops)
    def test_reference_numerics_large(self, device, dtype, op):
        if dtype in (torch.bool, torch.uint8, torch.int8):
            raise self.skipTest("bool, uint8 and int8 have no large values")
        tensors = generate_elementwise_unary_large_value_tensors(
            op, device=device, dtype=dtype, requires_grad=False
        )
        self._test_reference_numerics(dtype, op, tensors)

    @suppress_warnings
    @ops(
        reference_filtered_ops,
        allowed_dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64,
                        torch.complex64, torch.complex128),
    )  # fmt: skip
    def test_reference_numerics_extremal(self, device, dtype, op):
        tensors = generate_elementwise_unary_extremal_value_tensors(
            op, device=device, dtype=dtype, requires_grad=False
        )
        self._test_reference_numerics(dtype, op, tensors)


instantiate_device_type_tests(TestUnaryUfuncs, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
