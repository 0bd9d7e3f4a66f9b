"""The ``torch.npu`` device module: device management, lazy initialisation and forks, seeding,
AMP, streams and events, memory statistics, as real device modules (torch.cuda) offer them."""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import torch

from . import _C

# c10::DeviceType::PrivateUse1
_DEVICE_TYPE = 20
_in_bad_fork = False


def _after_fork_in_child() -> None:
    # As torch.cuda: a child forked after the device was initialised cannot use it
    # (only with ECHO_NPU_REFUSE_FORK=1; the runtime refuses as well, by process id).
    global _in_bad_fork
    if _C.refuse_fork() and _C.is_initialized():
        _in_bad_fork = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def is_available() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return _in_bad_fork or _C.in_bad_fork()


def is_initialized() -> bool:
    """Whether the device was initialised in this process (first allocation or ``init()``)."""
    return _C.is_initialized() and not _is_in_bad_fork()


def _lazy_init() -> None:
    """Called by torch before the first device use (torch >= 2.9 for PrivateUse1)."""
    if _is_in_bad_fork():
        raise RuntimeError(
            "echo_npu: cannot re-initialize npu in forked subprocess. To use npu with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _C.init()


def init() -> None:
    """Initialise the device now (otherwise the first allocation does)."""
    _lazy_init()


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def _index(device: object = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    return current_device() if dev.index is None else dev.index


def set_device(device: object) -> None:
    idx = _index(device)
    if idx >= 0:
        _C.set_device(idx)


class device:
    """Context manager selecting the current npu device."""

    def __init__(self, dev: object) -> None:
        self.idx = -1 if dev is None else _index(dev)
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = current_device()
        if self.idx >= 0:
            _C.set_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        _C.set_device(self.prev)
        return False


def synchronize(device: object = None) -> None:
    """Wait for the work queued on every stream of the device (the current one by default)."""
    _C.synchronize(_index(device))


# ---- streams and events: torch.Stream / torch.Event through the device guard --------------------
# A stream per priority pool and new ones (torch.Stream(device="npu")), a current stream per thread
# and device; in asynchronous mode (ECHO_NPU_ASYNC=1) each has a queue and a worker thread.
Stream = torch.Stream
if hasattr(torch, "Event"):
    Event = torch.Event


def _stream(stream_id: int, index: int) -> torch.Stream:
    return torch.Stream(stream_id=stream_id, device_index=index, device_type=_DEVICE_TYPE)


def current_stream(device: object = None) -> torch.Stream:
    """The calling thread's current stream of the device."""
    idx = _index(device)
    return _stream(_C.current_stream(idx), idx)


def default_stream(device: object = None) -> torch.Stream:
    return _stream(0, _index(device))


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the calling thread's current stream of its device."""
    _C.exchange_stream(stream.device_index, stream.stream_id)


def stream_priority(stream: torch.Stream) -> int:
    """A stream's priority (0 lowest, -1 greatest, as CUDA's)."""
    return _C.stream_priority(stream.device_index, stream.stream_id)


def priority_range() -> tuple[int, int]:
    """(least, greatest) stream priority, as ``torch.cuda.Stream.priority_range()``."""
    return tuple(_C.stream_priority_range())


class StreamContext:
    """``with torch.npu.stream(s):`` makes ``s`` current, then restores the previous stream."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.prev: int | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self.prev = _C.exchange_stream(self.stream.device_index, self.stream.stream_id)
        return self.stream

    def __exit__(self, *exc: object) -> bool:
        if self.stream is not None and self.prev is not None:
            _C.exchange_stream(self.stream.device_index, self.prev)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


# ---- AMP ------------------------------------------------------------------------------------
def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes ``torch.autocast(device_type="npu")`` may cast to."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# ---- random -----------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    _C.manual_seed(current_device(), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C.manual_seed(i, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    manual_seed(torch.seed())


def seed_all() -> None:
    manual_seed_all(torch.seed())


def initial_seed() -> int:
    return _C.initial_seed(current_device())


def get_rng_state(device: object = None) -> torch.Tensor:
    data = bytearray(_C.get_rng_state(_index(device)))
    return torch.frombuffer(data, dtype=torch.uint8).clone()


def set_rng_state(new_state: torch.Tensor, device: object = None) -> None:
    _C.set_rng_state(_index(device), bytes(new_state.to(torch.uint8).contiguous().numpy()))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    for i, state in enumerate(states):
        set_rng_state(state, i)


# ---- memory: the c10 allocator's statistics (what torch.accelerator reports too) -------------
def memory_stats(device: object = None) -> OrderedDict[str, Any]:
    """Allocator statistics of one device, keyed like ``torch.cuda.memory_stats()``
    (``"allocated_bytes.all.current"``, ...; pool ``all`` only). Not the protocol hook
    ``echo_npu.memory_stats()``, which counts the runtime's blocks."""
    raw = _C.allocator_stats(_index(device))
    out: OrderedDict[str, Any] = OrderedDict()
    for key in sorted(raw):
        name, _, metric = key.rpartition(".")
        out[f"{name}.all.{metric}" if name else key] = raw[key]
    return out


def memory_allocated(device: object = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: object = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: object = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: object = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: object = None) -> None:
    _C.reset_peak_stats(_index(device))


def reset_accumulated_memory_stats(device: object = None) -> None:
    _C.reset_accumulated_stats(_index(device))


def empty_cache() -> None:
    """Release the blocks the caching allocator holds (asynchronous mode; synchronises first)."""
    _C.empty_cache()


# Inductor's classes for this device, handed over on first use (the custom device module hook of
# torch._inductor.codegen.common.init_backend_registration): importing echo_npu never imports
# Inductor. ECHO_NPU_INDUCTOR=0 leaves the device without an Inductor backend.
_INDUCTOR_CLASSES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


if os.environ.get("ECHO_NPU_INDUCTOR_FAULTS"):
    # Inductor's caches are keyed without the faults: a clean compile cached earlier would be
    # reused (they are looked up before Inductor asks this module for its classes)
    import torch._inductor.config

    torch._inductor.config.force_disable_caches = True


def __getattr__(name: str) -> Any:
    if name in _INDUCTOR_CLASSES and os.environ.get("ECHO_NPU_INDUCTOR", "1") != "0":
        from . import inductor

        return getattr(inductor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
