"""Streams, events and the delay injector as the contract cases and the -asynchronous mode use them:
standard torch APIs only (torch.Stream, torch.Event, torch.accelerator), plus the backend's
optional `set_delay` hook (engine/protocol.py) where it has one.

A side stream is made once per process and device (a device may give every new stream a worker
of its own) and reused; delays are set on stream objects the caller names and removed on exit
(`ms < 0` removes a stream's own setting), so delays the backend was started with stay, except
a setting for every stream (None), which replaces and then removes one of the same kind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: milliseconds each delayed producer of the contract cases sleeps: long beside a host call, so
#: that a missing fence reads stale data every time, also on a loaded machine
DELAY_MS = 60.0

#: the side stream of each device of this process (see the module docstring)
_SIDE: dict[str, torch.Stream] = {}


def side_stream(device: torch.device) -> torch.Stream:
    """This process's side stream of `device` (created on first use)."""
    key = str(device)
    if key not in _SIDE:
        _SIDE[key] = torch.Stream(device=device)
    return _SIDE[key]


def current_stream(device: torch.device) -> torch.Stream:
    """The current stream of `device` (torch.accelerator's, by index)."""
    return torch.accelerator.current_stream(device.index or 0)


def describe(stream: torch.Stream) -> str:
    """A stream as a finding names it."""
    kind = "default stream" if stream.stream_id == 0 else "stream"
    return f"{kind} {stream.stream_id} of {stream.device}"


@contextlib.contextmanager
def delays(
    hook: Callable[..., Any] | None, settings: dict[Any, dict[str, float]]
) -> Iterator[bool]:
    """Delay the work of each kind on each stream ({stream: {kind: ms}}; the stream None: every
    stream of the device, the copy engines a runtime keeps to itself included) for the block;
    yields whether the backend has a delay injector."""
    if hook is None:
        yield False
        return
    done: list[tuple[str, Any]] = []
    try:
        for stream, kinds in settings.items():
            for kind, ms in kinds.items():
                hook(kind, ms, stream)
                done.append((kind, stream))
        yield True
    finally:
        for kind, stream in done:
            with contextlib.suppress(Exception):
                hook(kind, -1, stream)


def busy(stream: torch.Stream) -> bool:
    """Whether `stream` still has work queued (query() False): the device is asynchronous."""
    return not stream.query()


def pinned_empty(shape: Any, dtype: torch.dtype) -> torch.Tensor:
    """A pinned host tensor (the caller has checked that the device pins memory)."""
    return torch.empty(shape, dtype=dtype).pin_memory()
