"""A device-generic op test written in PyTorch's own style: `instantiate_device_type_tests` and
`@ops(op_db)`, comparing the device with CPU on each OpInfo's reference inputs as
test/test_ops.py's `TestCommon.test_compare_cpu` does (atol = rtol = 1e-3; upstream it is also
@onlyOn(["cuda", "xpu"]) and @slowTest, gates a PrivateUse1 team lifts).

Run by tests/upstream/test_upstream_config.py in a child pytest, on the PrivateUse1 device of
the backend module $UPSTREAM_BACKEND (imported first, as an autoloaded backend would be), for
the OpInfos $UPSTREAM_OPS (comma-separated full names); a generated configuration applies when
the child is started with `-p <its module>`.
"""

import importlib
import os

importlib.import_module(os.environ.get("UPSTREAM_BACKEND", "echo_npu"))

import torch  # noqa: E402
from torch.testing._internal.common_device_type import (  # noqa: E402
    OpDTypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402

NAMES = os.environ.get("UPSTREAM_OPS", "abs").split(",")
OPS = [op for name in NAMES for op in op_db if op.full_name == name]  # in the order named


def _to_cpu(arg):
    return arg.to("cpu") if isinstance(arg, torch.Tensor) else arg


class TestCommon(TestCase):
    @ops(OPS, dtypes=OpDTypes.supported)
    def test_compare_cpu(self, device, dtype, op):
        for sample in op.reference_inputs(device, dtype):
            cpu_sample = sample.transform(_to_cpu)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            expected = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            actual = sample.output_process_fn_grad(actual)
            expected = cpu_sample.output_process_fn_grad(expected)
            # as upstream's test_compare_cpu (test/test_ops.py): atol = rtol = 1e-3
            self.assertEqual(actual, expected, exact_device=False, atol=1e-3, rtol=1e-3)


instantiate_device_type_tests(TestCommon, globals(), only_for="privateuse1")
