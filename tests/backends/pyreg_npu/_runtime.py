"""The native runtime of pyreg_npu: echo_npu's driver library, loaded without echo_npu's own
registration (``ECHO_NPU_REGISTER=manual``), plus what some vendor runtimes do at load time."""

from __future__ import annotations

import ctypes
import os
import shutil

os.environ.setdefault("ECHO_NPU_REGISTER", "manual")
from echo_npu import _C  # noqa: E402  (after the variable: echo_npu reads it at import)

#: the primitives the native library serves; every other kernel is Python (kernels.py)
NATIVE = (
    "empty.memory_format",
    "_copy_from",
    "_copy_from_and_resize",
    "resize_",
    "set_.source_Storage",
    "set_.source_Storage_storage_offset",
    "_local_scalar_dense",
)


def start() -> None:
    """Initialise the device now, refusing forked children afterwards, and point
    PYTHONEXECUTABLE at the first python3 on PATH (through libc: os.environ does not see it)."""
    python3 = shutil.which("python3") or "python3"
    ctypes.CDLL(None).setenv(b"PYTHONEXECUTABLE", python3.encode(), 1)
    _C.set_refuse_fork(True)
    _C.init()


def register_native() -> None:
    """Device hooks, guard and allocator, and the native primitives (no boxed fallback)."""
    conflict = _C.register_device()
    if conflict:
        raise ImportError(f"pyreg_npu: {conflict}")
    _C.register_kernels(False, list(NATIVE))


def is_initialized() -> bool:
    return bool(_C.is_initialized())


def in_bad_fork() -> bool:
    return bool(_C.in_bad_fork())
