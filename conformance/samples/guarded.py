"""An OpInfo capture run in a forked child: a CPU kernel that traps on one of OpInfo's samples
(torch 2.9's `mvlgamma` of int64: SIGFPE) or hangs on it costs that sample, never the run.

Integer and bool dtypes only (samples/opinfo.py): integer division traps, IEEE floating
arithmetic does not (a fork per capture costs about 40 ms of warm-up in the child). Captures
run on a cache miss only (samples/opinfo.py keeps them on disk per torch version),
in the process that collects the cases, before any case: a crash there would end the run
before a single record was written. The child reports each sample's index before running it;
the one it died or hung on is skipped and the capture run again (at most `RETRIES` times).
Case runners (harness/runners.py) capture in place: a crash there costs one case, as any.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import tempfile
import time
from collections.abc import Callable

import torch

from conformance.engine.calls import Call, load_calls, save_calls

TIMEOUT = 120.0  # seconds one capture may take
RETRIES = 4  # samples skipped before the capture gives up (no samples from this OpInfo)
BACKWARD = -1  # the index reported before the backward pass

Captured = dict[str, dict[str, list[Call]]]
Capture = Callable[[frozenset[int], Callable[[int], None]], Captured]


class Where:
    """Whether captures run in forked children: yes, except in a case runner, where a crash
    already costs one case and a fork per capture costs more than the capture."""

    forked = True


WHERE = Where()


def in_place() -> None:
    """Captures in this process run in place from now on (called by a case runner)."""
    WHERE.forked = False


def guarded(capture: Capture, timeout: float = TIMEOUT) -> Captured:
    """`capture(skip, started)` in forked children until one finishes (see the docstring)."""
    if not WHERE.forked:
        return capture(frozenset(), lambda i: None)
    skip: set[int] = set()
    for _ in range(RETRIES + 1):
        result, culprit = _in_child(capture, frozenset(skip), timeout)
        if result is not None:
            return result
        if culprit is None or culprit in skip:
            return {}
        skip.add(culprit)
    return {}


def _in_child(capture: Capture, skip: frozenset[int], timeout: float):
    """(what the child captured, None) or (None, the index it was running when it died)."""
    fd, path = tempfile.mkstemp(prefix="conformance-capture-", suffix=".pt")
    os.close(fd)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        faulthandler.disable()  # a trap here is expected and handled: no traceback dump
        torch.set_num_threads(1)  # the parent's OpenMP pool does not exist in a forked child
        code = 1
        try:
            found = capture(skip, lambda i: os.write(write_fd, f"{i}\n".encode()))
            save_calls(found, path)
            os.write(write_fd, b"done\n")
            code = 0
        except BaseException:  # noqa: BLE001 - reported as no samples, never the parent's code
            pass
        os._exit(code)
    os.close(write_fd)
    try:
        status = _wait(pid, timeout)
        with os.fdopen(read_fd) as pipe:
            lines = pipe.read().split()
        if lines and lines[-1] == "done" and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return load_calls(path), None
        started = [int(x) for x in lines if x.lstrip("-").isdigit()]
        return None, (started[-1] if started else None)
    finally:
        os.unlink(path)


def _wait(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1]
        time.sleep(0.002)
