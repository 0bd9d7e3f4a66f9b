"""The ``torch.npu`` device module (device management, seeding, memory statistics)."""

from __future__ import annotations

import torch

from . import _C

_initialized = True


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _initialized


def init() -> None:
    """Nothing to initialise: the simulated device is ready at import."""


def _is_in_bad_fork() -> bool:
    return False


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
    """Kernels run synchronously; nothing to wait for."""


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


def memory_stats(device: object = None) -> dict[str, int]:
    """Allocator statistics (all devices share one simulated memory)."""
    return dict(_C.memory_stats())


def memory_allocated(device: object = None) -> int:
    return _C.memory_stats()["live_bytes"]


def max_memory_allocated(device: object = None) -> int:
    return _C.memory_stats()["peak_bytes"]


def empty_cache() -> None:
    """No caching allocator: nothing to release."""
