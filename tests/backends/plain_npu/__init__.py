"""plain_npu: a plain third-party-like PrivateUse1 backend (device ``plain``) for issue 48.

Its device memory is the C heap: the c10 allocator of ``plain_npu.cpp`` calls ``malloc`` and its
deleter ``free``, with no red zones, statistics or pools of its own, and the package offers none
of the suite's optional hooks (docs/BACKEND_PROTOCOL.md). Kernels: the primitives cpu_fallback
needs (empty, views, ``_copy_from``, ``resize_``, ``set_``, fill/zero, scalar reads), native
``relu`` and ``abs``, and the boxed ``cpu_fallback`` for everything else.

``PLAIN_NPU_FAULTS`` (comma-separated, read at every call; none by default) plants two heap bugs
that leave the values right:

- ``relu_writes_past``: relu writes 64 bytes (0x5A) past the end of its output's allocation when
  the output's element count is a non-zero multiple of 7;
- ``abs_uses_freed``: abs writes 16 zero bytes into its scratch block after freeing it.

Its real limitations (what a default run finds, none planted): the boxed fallback checks no
devices (a CPU tensor mixed with a ``plain`` one is computed, not refused), ``native_batch_norm``
through cpu_fallback loses the running statistics (its schema does not mark them mutated), no
``convolution_overrideable`` (convolutions), no sparse tensors.

The extension is compiled on first import with g++ against the installed torch into ``build/``
beside this file (named by a hash of the source, torch's version and the flags; a file lock makes
concurrent importers, xdist workers, build it once). ``PLAIN_NPU_CXX`` names another compiler.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import types

import torch

DEVICE_NAME = "plain"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "plain_npu.cpp")
BUILD = os.path.join(HERE, "build")


def _flags() -> list[str]:
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    lib = library_paths()[0]
    return [
        "-std=c++17",
        "-O2",
        "-g0",
        "-fPIC",
        "-shared",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *(f"-I{p}" for p in include_paths()),
        f"-L{lib}",
        f"-Wl,-rpath,{lib}",
        "-lc10",
        "-ltorch_cpu",
        "-ltorch",
    ]


def _build() -> str:
    """The extension's path, compiled first if this source/torch/flags has none yet."""
    compiler = os.environ.get("PLAIN_NPU_CXX") or shutil.which("g++") or "c++"
    flags = _flags()
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha1(
        b"\0".join([source, torch.__version__.encode(), compiler.encode(), *map(str.encode, flags)])
    ).hexdigest()[:16]
    path = os.path.join(BUILD, f"plain_npu_{key}.so")
    if os.path.exists(path):
        return path
    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait
        if os.path.exists(path):
            return path
        tmp = f"{path}.{os.getpid()}.tmp"
        cmd = [compiler, SOURCE, "-o", tmp, *flags]
        start = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise ImportError(f"plain_npu: cannot run the compiler {compiler}: {exc}") from None
        if done.returncode:
            with open(os.path.join(BUILD, "last-error.txt"), "w") as f:
                f.write(" ".join(cmd) + "\n\n" + done.stderr)
            first = next((ln for ln in done.stderr.splitlines() if "error" in ln), "?")
            raise ImportError(
                f"plain_npu: compiling plain_npu.cpp failed: {first} "
                f"(full output: {os.path.join(BUILD, 'last-error.txt')})"
            )
        os.replace(tmp, path)  # atomic: no importer ever loads a half-written library
        if os.environ.get("PLAIN_NPU_VERBOSE"):
            print(f"plain_npu: built {path} in {time.monotonic() - start:.1f}s", file=sys.stderr)
    return path


_current = torch._C._get_privateuse1_backend_name()
if _current not in ("privateuseone", DEVICE_NAME):
    raise ImportError(
        f"plain_npu: PrivateUse1 is already taken by another backend (device '{_current}'); "
        "only one PrivateUse1 backend can be imported per process"
    )

LIBRARY = _build()
torch.ops.load_library(LIBRARY)  # its static initialisers register allocator, guard, hooks, kernels
_lib = ctypes.CDLL(LIBRARY)
_lib.plain_npu_is_initialized.restype = ctypes.c_int


# ---- the device module torch.plain ------------------------------------------------------------
def is_available() -> bool:
    return True


def is_initialized() -> bool:
    """Whether this process allocated device memory yet."""
    return bool(_lib.plain_npu_is_initialized())


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    """Nothing to initialise."""


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: object) -> None:
    """One device only."""
    index = device if isinstance(device, int) else torch.device(device).index
    if index not in (None, 0):
        raise RuntimeError(f"plain_npu: invalid device index {index} (one device)")


def synchronize(device: object = None) -> None:
    """Kernels run synchronously."""


class device:  # UntypedStorage.to enters torch.<device>.device(d)
    """Context manager selecting the current device: there is only one."""

    def __init__(self, dev: object) -> None:
        if dev is not None:
            set_device(dev)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


# The device has no generator of its own: random ops run on CPU through cpu_fallback, drawing
# from CPU's generator, which torch.manual_seed seeds; the device's RNG state is CPU's.
def manual_seed(seed: int) -> None:
    """Nothing of the device's own to seed."""


def manual_seed_all(seed: int) -> None:
    """Nothing of the device's own to seed."""


def get_rng_state(device: object = None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: object = None) -> None:
    torch.set_rng_state(new_state)


device_module = types.ModuleType(f"{__name__}.device", "torch.plain: the plain device module")
for _fn in (
    is_available,
    is_initialized,
    _is_in_bad_fork,
    _lazy_init,
    device_count,
    current_device,
    set_device,
    synchronize,
    device,
    manual_seed,
    manual_seed_all,
    get_rng_state,
    set_rng_state,
):
    setattr(device_module, _fn.__name__, _fn)

if _current != DEVICE_NAME:
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
if getattr(torch, DEVICE_NAME, None) is not device_module:
    torch._register_device_module(DEVICE_NAME, device_module)
if not hasattr(torch.Tensor, DEVICE_NAME):
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_storage=True)
