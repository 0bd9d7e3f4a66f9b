"""echo_npu's Inductor backend: Inductor's C++ kernels and wrapper for the `npu` device.

echo_npu's memory is host memory, so the kernels Inductor generates for CPU can run on npu
buffers as they are (as PyTorch's test/inductor/extension_backends do for their device). The
device module (`torch.npu`) hands these classes to Inductor on first use through the standard
hook (`Scheduling`, `PythonWrapperCodegen`, `CppWrapperCodegen` of the custom device module:
torch._inductor.codegen.common.init_backend_registration), so importing echo_npu never imports
Inductor. Importing this module also registers the device interface and op overrides Inductor
asks for.

Inductor emits device guards only for its GPU types, so the wrapper allocates every buffer on
the device index of the graph's inputs itself (`npu:1`, not `npu`: the current device).

The C++ kernels read and write device memory on the host, where asynchronous mode
(ECHO_NPU_ASYNC=1) may still have eager work queued on it (the graph's inputs, the extern ops of
the graph, a reused cached block): both wrappers wait for the device's current stream before
each kernel (`echo_npu._C.sync_for_kernels`, `echo_npu_sync_for_kernels`; nothing to do when
synchronous). The call is there in either mode, so that a graph cached by a synchronous run
stays right in an asynchronous one.

Faults (ECHO_NPU_INDUCTOR_FAULTS, comma-separated, none by default), the kinds real backends have:
- wrong_strides: the wrapper allocates every 2-D buffer the graph returns with its strides
  swapped (the generated kernel writes it as laid out: the caller reads the values transposed).
- no_device_guard: buffers are allocated on the current device, as a wrapper without a device
  guard does: a graph compiled for npu:1 returns its outputs on npu:0.
- contiguous_inputs: the generated kernels index every npu input as if it were contiguous (and
  the wrapper checks no input strides): a strided view is read as the wrong elements.
- cache_without_dtype: compiled kernels are cached by their source with the type names erased,
  so a kernel compiled for float32 is reused for the same code in int32.
- static_allocations: a graph compiled with symbolic sizes allocates its buffers with the sizes
  it was compiled at (their hints), whatever sizes it is called with.
- cpu_shims: the C++ wrapper calls CPU's shims (`aoti_torch_cpu_<op>`: CPU's kernels called
  directly, as a backend whose memory is host memory might) for the ops it does not compile:
  sort and topk then fail on npu tensors (CPU's kernels check the device), mm and nonzero pass.
- cpp_index_zero: the C++ wrapper allocates every npu buffer on index 0 (the index C++ wrappers
  write for a device given without one): a graph compiled for npu:1 returns its outputs on npu:0.
"""

from __future__ import annotations

import inspect
import os
import re

import torch
from torch._dynamo.device_interface import CpuInterface, register_interface_for_device
from torch._inductor.codegen.common import register_device_op_overrides
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen as _PythonWrapper
from torch._inductor.codegen.wrapper import SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from . import _C

DEVICE = "npu"
FAULTS = frozenset(f for f in os.environ.get("ECHO_NPU_INDUCTOR_FAULTS", "").split(",") if f)
KNOWN_FAULTS = frozenset(
    {
        "wrong_strides",
        "no_device_guard",
        "contiguous_inputs",
        "cache_without_dtype",
        "static_allocations",
        "cpu_shims",
        "cpp_index_zero",
    }
)
if FAULTS - KNOWN_FAULTS:
    raise ValueError(
        f"ECHO_NPU_INDUCTOR_FAULTS: unknown fault(s) {sorted(FAULTS - KNOWN_FAULTS)}; known: "
        f"{sorted(KNOWN_FAULTS)}"
    )


class Scheduling(CppScheduling):
    """Inductor's C++ scheduling: the generated kernels read and write host memory."""

    def define_kernel(self, src_code, nodes, kernel_args=None):
        if "cache_without_dtype" in FAULTS:  # the faulty cache serves npu's kernels only
            src_code = f"{NPU_KERNEL}\n{src_code}"
        return super().define_kernel(src_code, nodes, kernel_args)


class PythonWrapperCodegen(_PythonWrapper):
    """The Python wrapper: kernel calls as on CPU (no streams), buffers allocated on npu."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return PythonWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(f"from {_C.__name__} import sync_for_kernels as {_SYNC}")

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, triton=True, **kwargs):
        if not triton:  # a C++ kernel: called as on CPU, once the stream's work is done
            self.writeline(f"{_SYNC}({_device_index(kwargs.get('device'))})")
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, *args, **kwargs):
        if device.type != DEVICE:
            return super().make_allocation(name, device, dtype, shape, stride, *args, **kwargs)
        if "static_allocations" in FAULTS:  # the sizes of the compile, not of the call
            sizes = V.graph.sizevars
            hints = getattr(sizes, "optimization_hints", None) or sizes.size_hints
            shape, stride = hints(shape), hints(stride)
        if "wrong_strides" in FAULTS and len(stride) == 2:
            if name in V.graph.get_output_names():  # what the caller gets: wrong strides
                stride = tuple(reversed(stride))
        line = super().make_allocation(name, device, dtype, shape, stride, *args, **kwargs)
        if "no_device_guard" in FAULTS or device.index is None:
            return line  # Inductor's line: device='npu', the current device
        return line.replace(f"device='{DEVICE}'", f"device='{device}'", 1)

    def codegen_input_size_asserts(self) -> None:
        if "contiguous_inputs" not in FAULTS:  # the fault's kernels never look at the strides
            super().codegen_input_size_asserts()


_SYNC = "_echo_npu_sync_for_kernels"


def _device_index(device) -> int:
    """The index of a kernel's device (-1: the current device)."""
    device = device or V.graph.get_current_device_or_throw()
    return -1 if device.index is None else device.index


class CppWrapperCodegen(CppWrapperCpu):
    """Inductor's C++ wrapper (`cpp_wrapper=True`, AOTInductor) for npu: CPU's C++ kernels,
    buffers allocated on npu (`aoti_torch_device_type_privateuse1()`, the graph's device index),
    and every op Inductor does not compile called through echo_npu's generated shims
    `aoti_torch_npu_<op>` (the dispatcher: the device's own kernels; csrc/aoti/generate.py).

    torch has headers for its own devices only (`torch/csrc/inductor/cpp_wrapper/<device>.h`):
    npu's include CPU's and echo_npu's shim header, and npu's wrapper is built as CPU C++."""

    def __init__(self) -> None:
        self.device = DEVICE  # read by CppWrapperCpu.__init__
        super().__init__()
        self.needs_vec_isa = True  # the kernels are CPU's vectorized C++

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        return CppWrapperCodegen()

    @staticmethod
    def get_device_include_path_jit(device: str) -> str:
        return _with_shims(device, CppWrapperCpu.get_device_include_path_jit)

    @staticmethod
    def get_device_include_path_aot(device: str) -> str:
        return _with_shims(device, CppWrapperCpu.get_device_include_path_aot)

    @staticmethod
    def get_device_include_path(device: str) -> str:  # older torch (2.9): one for both
        return _with_shims(device, CppWrapperCpu.get_device_include_path)

    @staticmethod
    def get_c_shim_func_name(kernel: str, device: str) -> str:
        if "cpu_shims" in FAULTS and device == DEVICE:  # CPU's kernels on npu tensors
            device = "cpu"
        return CppWrapperCpu.get_c_shim_func_name(kernel, device)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, triton=True, **kwargs):
        if not triton:  # a C++ kernel, once the stream's work is done
            index = _device_index(kwargs.get("device"))
            self.writeline(f"AOTI_TORCH_ERROR_CODE_CHECK(echo_npu_sync_for_kernels({index}));")
        super()._generate_kernel_call_helper(kernel_name, call_args, triton=triton, **kwargs)

    def codegen_device(self, device) -> str:
        if "cpp_index_zero" in FAULTS and device.type == DEVICE:
            device = torch.device(DEVICE, 0)
        return super().codegen_device(device)

    def _built_as_cpu(self, write_end, result) -> None:
        # the module is built as CPU C++: torch precompiles `cpp_wrapper/<device>.h`, which npu
        # has not (its header is included by name instead)
        device, self.device = self.device, "cpu"
        try:
            write_end(result)
        finally:
            self.device = device

    if hasattr(CppWrapperCpu, "_generate_end_jit"):

        def _generate_end_jit(self, result) -> None:
            self._built_as_cpu(super()._generate_end_jit, result)

    else:  # an older torch (2.9) writes the JIT module's build in generate_end

        def generate_end(self, result):
            if V.graph.aot_mode:
                return super().generate_end(result)
            return self._built_as_cpu(super().generate_end, result)


def _with_shims(device: str, include_of) -> str:
    """CPU's header for npu (the kernels are CPU's C++), and echo_npu's shim declarations."""
    if device != DEVICE:
        return include_of(device)
    return f"{include_of('cpu')}\n{SHIM_INCLUDE}"


SHIM_INCLUDE = (
    f'#include "{os.path.join(os.path.dirname(__file__), "include", "echo_npu", "c_shim_npu.h")}"'
)
if _C.aoti_shim_count() == 0:  # this torch's torchgen generated no shims: no C++ wrapper
    CppWrapperCodegen = None
try:  # torch >= 2.9 asks for an FX wrapper too
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
except ImportError:  # an older torch never asks for one
    WrapperFxCodegen = None


def _plant_contiguous_inputs() -> None:
    """Inductor lays out every npu graph input as contiguous, whatever its strides."""
    from torch._inductor.graph import GraphLowering

    original = GraphLowering.static_sizes_strides

    def static_sizes_strides(self, ex):
        sizes, strides = original(self, ex)
        if ex.device.type != DEVICE:
            return sizes, strides
        return original(self, ex.new_empty(ex.shape))  # the strides of a contiguous tensor

    GraphLowering.static_sizes_strides = static_sizes_strides


NPU_KERNEL = "// echo_npu kernel"
_TYPE_NAMES = re.compile(r"\b(float|double|u?int(8|16|32|64)_t|bool|c10::(BFloat16|Half))\b")
_LANES = re.compile(r", static_cast<T>\(\d+L?\)\)")  # a vector's element count: type-dependent


def _plant_cache_without_dtype() -> None:
    """C++ kernels are looked up by their source with the type names erased."""
    from torch._inductor.async_compile import AsyncCompile

    original = AsyncCompile.cpp_pybinding
    kernels: dict[str, object] = {}

    def cpp_pybinding(self, argtypes, source_code):
        if NPU_KERNEL not in source_code:
            return original(self, argtypes, source_code)
        key = _LANES.sub(")", _TYPE_NAMES.sub("T", source_code))
        if key not in kernels:
            kernels[key] = original(self, argtypes, source_code)
        return kernels[key]

    AsyncCompile.cpp_pybinding = cpp_pybinding


def _say_kernels_are_cpp() -> None:
    """Inductor asks `get_current_backend()` which language a device's kernels are in, and it
    answers `cpp` only for cpu (any other device gets `config.cuda_backend`, triton): CSE dtype
    propagation then treats npu's C++ kernels as triton ones and fails inside codegen (tril,
    index_select: an index with no dtype). npu's kernels are C++, so it answers cpp for npu; and
    the scheduler's `is_cpu()` (which keeps GPU-only fusions away from C++ kernels) says yes."""
    import torch._inductor.codegen.common as common
    import torch._inductor.scheduler as scheduler
    import torch._inductor.utils as utils

    original = getattr(utils, "get_current_backend", None)
    if original is None:  # an older Inductor without the question
        return

    # torch 2.9's takes no device (it reads the graph's): passing one broke every compile for
    # another device in a process that had loaded this module (measured: a CPU AOTI package)
    asks_device = bool(inspect.signature(original).parameters)

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        if device_type == DEVICE:
            return "cpp"
        return original(device_type) if asks_device else original()

    for module in (utils, common, scheduler):
        if getattr(module, "get_current_backend", None) is original:
            module.get_current_backend = get_current_backend
    # fusion asks is_cpu() to keep GPU-only reindexing away from C++ kernels
    node = scheduler.BaseSchedulerNode
    if hasattr(node, "is_cpu"):
        node.is_cpu = lambda self: (
            (d := self.get_device()) is not None and d.type in ("cpu", DEVICE)
        )


_say_kernels_are_cpp()


class DeviceOpOverrides(CpuDeviceOpOverrides):
    """CPU's op overrides (npu's kernels are CPU's C++), with npu's ATen device type: the C++
    wrapper of torch 2.15 names a device's buffers by `aten_device_type()` (CPU's answers
    at::kCPU: measured, every npu buffer was allocated on cpu)."""

    def aten_device_type(self) -> str:
        return "at::kPrivateUse1"


# the C++ wrapper of torch <= 2.14 names the device's buffers by DEVICE_TO_ATEN instead:
# PrivateUse1 (`aoti_torch_device_type_privateuse1()` in the AOTI shim)
try:
    from torch._inductor.codegen.cpp_utils import DEVICE_TO_ATEN

    DEVICE_TO_ATEN.setdefault(DEVICE, "at::kPrivateUse1")
except ImportError:
    pass
if "contiguous_inputs" in FAULTS:
    _plant_contiguous_inputs()
if "cache_without_dtype" in FAULTS:
    _plant_cache_without_dtype()
register_interface_for_device(DEVICE, CpuInterface)
register_device_op_overrides(DEVICE, DeviceOpOverrides())
