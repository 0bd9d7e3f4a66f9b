"""TestReductions' extremal-values reference test, written in PyTorch's style from
conformance/upstream/models.py's row (test/test_reductions.py): a (5,) tensor whose element 2 is
each of 0, 1, nan, inf, -inf, reduced on the device against the OpInfo's numpy reference."""

import math

import torch
from _select import listed
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase, run_tests


class TestReductions(TestCase):
    def _test_ref(self, op, t, *args, **kwargs):
        result = op(t, *args, **kwargs)
        expected = op.ref(t.detach().cpu().numpy(), *args, **kwargs)
        self.assertEqual(result, expected, exact_dtype=False)

    @ops(listed("reductions_with_ref"), allowed_dtypes=(torch.float32, torch.complex64))
    def test_ref_extremal_values(self, device, dtype, op):
        for extremal in (0, 1, math.nan, math.inf, -math.inf):
            t = make_tensor((5,), dtype=dtype, device=device, exclude_zero=True)
            t[2] = extremal
            self._test_ref(op, t)


instantiate_device_type_tests(TestReductions, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
