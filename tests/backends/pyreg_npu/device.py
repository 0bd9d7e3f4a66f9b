"""``torch.pyreg``: the device module, as small as many third-party ones (no memory statistics,
no seeding)."""

from __future__ import annotations

from . import _runtime


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _runtime.is_initialized()


def _is_in_bad_fork() -> bool:
    return _runtime.in_bad_fork()


def _lazy_init() -> None:
    """Already done at import."""


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: object) -> None:
    """One device only."""


def synchronize(device: object = None) -> None:
    """Kernels run synchronously."""
