"""echo_npu's Inductor backend: Inductor's C++ kernels and wrapper for the `npu` device.

echo_npu's memory is host memory, so the kernels Inductor generates for CPU can run on npu
buffers as they are (as PyTorch's test/inductor/extension_backends do for their device). The
device module (`torch.npu`) hands these classes to Inductor on first use through the standard
hook (`Scheduling`, `PythonWrapperCodegen`, `CppWrapperCodegen` of the custom device module:
torch._inductor.codegen.common.init_backend_registration), so importing echo_npu never imports
Inductor. Importing this module also registers the device interface and op overrides Inductor
asks for.

Faults (ECHO_NPU_INDUCTOR_FAULTS, comma-separated, none by default):
- wrong_strides: the wrapper allocates every 2-D buffer the graph returns with its strides
  swapped (the generated kernel writes it as laid out: the caller reads the values transposed).
"""

from __future__ import annotations

import os

from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
from torch._inductor.codegen.common import register_device_op_overrides
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen as _PythonWrapper
from torch._inductor.codegen.wrapper import SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

DEVICE = "npu"
FAULTS = frozenset(f for f in os.environ.get("ECHO_NPU_INDUCTOR_FAULTS", "").split(",") if f)
KNOWN_FAULTS = frozenset({"wrong_strides"})
if FAULTS - KNOWN_FAULTS:
    raise ValueError(
        f"ECHO_NPU_INDUCTOR_FAULTS: unknown fault(s) {sorted(FAULTS - KNOWN_FAULTS)}; known: "
        f"{sorted(KNOWN_FAULTS)}"
    )


class Scheduling(CppScheduling):
    """Inductor's C++ scheduling: the generated kernels read and write host memory."""


class PythonWrapperCodegen(_PythonWrapper):
    """The Python wrapper: kernel calls as on CPU (no streams), buffers allocated on npu."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return PythonWrapperCodegen()

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, triton=True, **kwargs):
        if not triton:  # a C++ kernel: called as on CPU
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, *args, **kwargs):
        if "wrong_strides" in FAULTS and len(stride) == 2 and device.type == DEVICE:
            if name in V.graph.get_output_names():  # what the caller gets: wrong strides
                stride = tuple(reversed(stride))
        return super().make_allocation(name, device, dtype, shape, stride, *args, **kwargs)


CppWrapperCodegen = CppWrapperCpu
try:  # torch >= 2.9 asks for an FX wrapper too
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
except ImportError:  # an older torch never asks for one
    WrapperFxCodegen = None

register_interface_for_device(DEVICE, CpuInterface)
register_device_op_overrides(DEVICE, CpuDeviceOpOverrides())
