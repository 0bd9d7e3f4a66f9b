"""Asynchronous mode and the delay injector (``ECHO_NPU_ASYNC``, ``ECHO_NPU_DELAY``).

With ``ECHO_NPU_ASYNC=1`` every stream of the device has a queue and a worker thread: kernels
and copies are queued and run later, in order, and the host meets them only where it
synchronises (a blocking copy to the host, ``.item()``, ``Event.synchronize``,
``Stream.synchronize``, ``torch.npu.synchronize``). The delay injector makes each worker sleep
before each piece of work of a kind (``kernel``, ``h2d``, ``d2h``, ``d2d``), so that a missing
fence reads stale data every time.
"""

from __future__ import annotations

import atexit
import os

import torch

from . import _C
from ._env import DELAY_KINDS

_SCOPES = {"all": -1, "default": -2, "side": -3}


def _kind(name: str) -> int:
    """The runtime's number of a delay kind (the order of ``DELAY_KINDS``)."""
    if name not in DELAY_KINDS:
        raise ValueError(f"invalid delay kind {name!r}; valid kinds: {', '.join(DELAY_KINDS)}")
    return DELAY_KINDS.index(name)


def configure(asynchronous: bool, delays: list[tuple[str, str, int]]) -> None:
    """Called once at import with the parsed environment (before any work is queued)."""
    _C.set_async(asynchronous)
    for scope, kind, micros in delays:
        _C.set_delay(_kind(kind), micros, 0, _SCOPES[scope])
    if asynchronous:
        atexit.register(_C.drain)  # no worker runs while the interpreter tears down
        # a forked child has no workers: nothing may be queued when Python forks (here, before
        # the C-level fork handlers, which must not wait or allocate)
        os.register_at_fork(before=_C.drain)


def is_async() -> bool:
    """Whether work is queued on streams (``ECHO_NPU_ASYNC=1``) or runs at once."""
    return bool(_C.is_async())


def set_delay(kind: str, ms: float, stream: torch.Stream | str | None = None) -> None:
    """Sleep ``ms`` milliseconds before each piece of work of ``kind`` (``kernel``, ``h2d``,
    ``d2h``, ``d2d``) on ``stream``: a ``torch.Stream`` of the device, ``"default"`` or
    ``"side"`` (the default or the other streams) or ``None`` (every stream). The most specific
    setting wins; ``ms < 0`` removes one. Only asynchronous mode queues work."""
    micros = -1 if ms < 0 else round(ms * 1000)
    if stream is None or isinstance(stream, str):
        scope = _SCOPES.get(stream or "all")
        if scope is None:
            raise ValueError(f"invalid stream {stream!r}; valid: a torch.Stream, default, side")
        _C.set_delay(_kind(kind), micros, 0, scope)
    else:
        _C.set_delay(_kind(kind), micros, stream.device_index, stream.stream_id)


def clear_delays() -> None:
    """Forget every delay (the environment's too)."""
    _C.clear_delays()
