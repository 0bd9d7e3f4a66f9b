"""echo_npu: the reference simulated NPU (a PrivateUse1 backend) for torch-conformance.

Importing registers the device (renamed ``npu`` unless ``ECHO_NPU_DEVICE_NAME=privateuseone``),
the ``torch.<name>`` device module and the backend protocol functions of
docs/BACKEND_PROTOCOL.md; with ``ECHO_NPU_REGISTER=manual`` importing registers nothing and
``echo_npu.register()`` does (a backend whose users call a register function). Environment
variables are read once, here. Importing does not initialise the device: the first device
allocation (or ``torch.npu.init()``) does.

Registration is an explicit call, not a static initialiser of the extension: when another
library already registered PrivateUse1 hooks, the import fails with a one-line ImportError
instead of aborting the interpreter, and a second import is a no-op. ``echo_npu:_autoload`` is
the ``torch.backends`` entry point (see ``python -m echo_npu.autoload``).
"""

from __future__ import annotations

import torch

from . import _env

_MODE = _env.allocator_mode()
DEVICE_NAME = _env.device_name()
_ROUTES = _env.fallback_ops()
_FAULTS = _env.faults()
_REFUSE_FORK = _env.refuse_fork()
_NO_FALLBACK = _env.no_fallback()
_NO_HOOKS = _env.no_hooks()
_REGISTRATION = _env.registration()
_ASYNC = _env.async_mode()
_DELAYS = _env.delays(_ASYNC)
_RUNTIME = _env.runtime_personality()

# the settings must be validated before the library loads
from . import _C, _exit, _streams  # noqa: E402
from ._streams import clear_delays, is_async, set_delay  # noqa: E402, F401

_streams.configure(_ASYNC, _DELAYS)
# runtime personalities (ECHO_NPU_RUNTIME): bit i is _env.RUNTIME_PERSONALITIES[i]
_C.set_runtime_personality(
    sum(1 << _env.RUNTIME_PERSONALITIES.index(name) for name in _RUNTIME),
    _env.device_lock_path() if "exclusive" in _RUNTIME else "",
    DEVICE_NAME,
)


def _register_device() -> None:
    """Register hooks, guard, allocator, kernels and the device module (idempotent)."""
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", DEVICE_NAME):
        raise ImportError(
            f"echo_npu: PrivateUse1 is already taken by another backend (device '{current}'); "
            "only one PrivateUse1 backend can be imported per process"
        )
    conflict = _C.register_device()
    if conflict:
        owner = getattr(getattr(torch, current, None), "__name__", None)
        who = f"device '{current}'" + (f", module {owner}" if owner else "")
        raise ImportError(
            f"echo_npu: {conflict} ({who}); only one PrivateUse1 backend can be imported per "
            "process (with TORCH_DEVICE_BACKEND_AUTOLOAD=0, import torch loads none)"
        )
    _C.set_allocator_mode(_MODE)
    _C.set_refuse_fork(_REFUSE_FORK)
    _C.set_faults(_FAULTS)
    _C.register_kernels(not _NO_FALLBACK)
    _C.set_fallback_routes(_ROUTES)  # names are checked against the registered kernels
    _C.register_aoti_runner(DEVICE_NAME)  # aoti_load_package's runner for npu packages
    # what Inductor builds for npu (cpp_wrapper modules, AOTI models, also from its caches
    # without compiling again) calls aoti_torch_npu_* shims: make _C's symbols global
    _C.export_aoti_shims()
    # before the interpreter finalises, torch's autograd device threads let go of earlier
    # backward passes (a torch 2.13 race aborted scripts at exit: _exit.py)
    _exit.register()

    from . import device as device_module

    if current != DEVICE_NAME:
        torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    if getattr(torch, DEVICE_NAME, None) is not device_module:
        torch._register_device_module(DEVICE_NAME, device_module)
    if not hasattr(torch.Tensor, DEVICE_NAME):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )

    # the c10d backend "echo" for the device (docs/BACKEND.md, "c10d backend"); a torch built
    # without distributed (torch.distributed.is_available() false) gets none
    if torch.distributed.is_available():
        from . import distributed

        distributed.register_backend(DEVICE_NAME)


def register() -> None:
    """Register the device (what importing does, unless ``ECHO_NPU_REGISTER=manual``); a second
    call does nothing."""
    _register_device()


if _REGISTRATION == "import":
    _register_device()


def _autoload() -> None:
    """``torch.backends`` entry point: ``import torch`` imports this package, which registers
    the device; nothing more to do (as in PyTorch's OpenReg)."""


def allocator_mode() -> str:
    """Allocator mode chosen at import: ``malloc``, ``aligned``, ``guard`` or ``page``."""
    return _C.allocator_mode()


def memory_stats() -> dict[str, int]:
    """``live_blocks``, ``live_bytes``, ``peak_bytes``, ``total_blocks``, ``total_bytes``."""
    return dict(_C.memory_stats())


def live_blocks() -> list[dict]:
    """One dict per live block: ``ptr``, ``size``, ``op``, ``serial``."""
    return list(_C.live_blocks())


def check_memory() -> list[dict]:
    """Every corrupted red zone seen so far (guard/page modes): ``ptr``, ``size``, ``op``,
    ``side``, ``offset``, ``first_seen_after`` (plus ``serial``)."""
    return list(_C.check_memory())


def clear_memory_errors() -> None:
    """Forget the recorded red-zone corruptions."""
    _C.clear_memory_errors()


def native_ops() -> list[str]:
    """Overload names registered natively for PrivateUse1 (``"add.Tensor"``, ``"abs"``)."""
    return list(_C.native_ops())


def set_fallback_routes(ops: list[str]) -> None:
    """Route these native overloads through the boxed cpu_fallback (``[]`` restores native)."""
    _C.set_fallback_routes(list(ops))


def get_fallback_routes() -> list[str]:
    return list(_C.get_fallback_routes())


def fallback_counts() -> dict[str, int]:
    """Calls that went through the boxed cpu_fallback, per overload name, since start/reset."""
    return dict(_C.fallback_counts())


def reset_fallback_counts() -> None:
    _C.reset_fallback_counts()


def fault_names() -> list[str]:
    """All fault switches understood by :func:`set_faults`."""
    return list(_C.fault_names())


def fault_descriptions() -> dict[str, str]:
    """Fault name -> one-line description (the list in backend/csrc/aten/faults.def)."""
    return dict(_C.fault_descriptions())


def set_faults(names: list[str]) -> None:
    """Switch on exactly these faults (``[]`` turns all off)."""
    _C.set_faults(list(names))


def get_faults() -> list[str]:
    return list(_C.get_faults())


def runtime_personality() -> tuple[str, ...]:
    """The runtime personalities in effect (``ECHO_NPU_RUNTIME``: ``threaded``, ``exclusive``,
    ``slow_init``, ``teardown_hang``; empty by default), for echo_npu's own tests. echo_npu's
    switch only: not a protocol hook, not in ``__all__``."""
    flags = _C.runtime_personality()
    return tuple(n for i, n in enumerate(_env.RUNTIME_PERSONALITIES) if flags >> i & 1)


def kernel_launches() -> int:
    """Number of cmodel kernel launches since start."""
    return _C.kernel_launches()


# The optional hooks of docs/BACKEND_PROTOCOL.md. ECHO_NPU_NO_HOOKS=1 removes them, so the
# package looks like a third-party backend that offers none.
PROTOCOL_HOOKS = (
    "set_fallback_routes",
    "get_fallback_routes",
    "fallback_counts",
    "check_memory",
    "clear_memory_errors",
    "live_blocks",
    "memory_stats",
    "allocator_mode",
    "set_delay",
)

__all__ = [
    "DEVICE_NAME",
    "PROTOCOL_HOOKS",
    "allocator_mode",
    "check_memory",
    "clear_memory_errors",
    "fallback_counts",
    "fault_descriptions",
    "fault_names",
    "get_fallback_routes",
    "get_faults",
    "kernel_launches",
    "live_blocks",
    "memory_stats",
    "native_ops",
    "register",
    "reset_fallback_counts",
    "set_fallback_routes",
    "set_faults",
]

if _NO_HOOKS:
    for _name in PROTOCOL_HOOKS:
        del globals()[_name]
    __all__ = [n for n in __all__ if n not in PROTOCOL_HOOKS]
