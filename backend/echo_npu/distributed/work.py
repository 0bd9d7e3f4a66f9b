"""The ``echo`` backend's Work: completed by the group's worker (or a receive's thread)."""

from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist

DistError = getattr(dist, "DistBackendError", RuntimeError)


def _seconds(timeout) -> float | None:
    """A wait timeout (timedelta or milliseconds) in seconds; None for none (0 = kNoTimeout)."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout) / 1000.0
    return s if s > 0 else None


class EchoWork(dist.Work):
    """A collective's handle. ``wait()`` blocks until the results are in the output tensors
    (raising the collective's error), ``is_completed()`` tells without blocking,
    ``get_future()`` is completed with the output tensors (a list) at the same moment."""

    def __init__(self, name: str, outputs):
        super().__init__()
        self._name = name
        self._outputs = outputs
        self._done = threading.Event()
        self._exc: BaseException | None = None
        self._future = torch.futures.Future()
        self._source_rank_value = -1

    # called by the worker
    def _complete(self) -> None:
        if not self._done.is_set():
            self._done.set()
            self._future.set_result(self._outputs)

    def _fail(self, exc: BaseException) -> None:
        if not self._done.is_set():
            self._exc = exc
            self._done.set()
            self._future.set_exception(exc)

    # the Work API
    def wait(self, timeout=None) -> bool:
        seconds = _seconds(timeout)
        if not self._done.wait(seconds):
            raise DistError(f"echo: {self._name}: Work.wait timed out after {seconds} s")
        if self._exc is not None:
            raise self._exc
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._exc is None

    def exception(self):
        return self._exc

    def result(self):
        return self._outputs

    def get_future(self):
        return self._future

    def synchronize(self) -> None:
        self.wait()

    def source_rank(self) -> int:
        return self._source_rank_value

    _source_rank = source_rank
