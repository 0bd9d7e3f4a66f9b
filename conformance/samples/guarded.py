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

import importlib
import os
import signal
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from conformance.engine.calls import Call, load_calls, save_calls
from conformance.engine.held_stderr import HELD
from conformance.processes.forker import FORKER
from conformance.processes.forking import TaskEnd, read_progress
from conformance.processes.messages import say
from conformance.processes.this import THIS

TIMEOUT = 120.0  # seconds one capture may take
RETRIES = 4  # samples skipped before the capture gives up (no samples from this OpInfo)
BACKWARD = -1  # the index reported before the backward pass

Captured = dict[str, dict[str, list[Call]]]
#: fn(*args, skip, started) -> Captured: a module-level function (a forked child finds it by name)
Capture = Callable[..., Captured]


def guarded(
    capture: Capture, args: tuple = (), timeout: float = TIMEOUT, warm: tuple[str, ...] = ()
) -> Captured:
    """`capture(*args, skip, started)` in forked children until one finishes (see the
    docstring); forked as processes/forking.py allows (directly, or by a zygote, which first
    calls the `warm` functions once: processes/forker.py `Forker.start`)."""
    if THIS.kind.runs_cases:  # a case runner: a crash costs one case already, a fork more
        return capture(*args, frozenset(), lambda i: None)
    skip: set[int] = set()
    for _ in range(RETRIES + 1):
        result, culprit = _in_child(capture, args, frozenset(skip), timeout, warm)
        if result is not None:
            return result
        if culprit is None or culprit in skip:
            return {}
        skip.add(culprit)
    return {}


def _in_child(
    capture: Capture, args: tuple, skip: frozenset[int], timeout: float, warm: tuple[str, ...]
):
    """(what the child captured, None) or (None, the index it was running when it died)."""
    payload = {"args": args, "skip": skip}
    end, found = _forked("capture_task", capture, payload, timeout, warm, load_calls)
    return (found, None) if end.finished else (None, end.last_started)


def capture_task(payload: dict, progress_fd: int) -> None:
    """In the forked child: run the capture, save what it found, say "done"."""
    torch.set_num_threads(1)  # no OpenMP pool in a forked child
    found = _function(payload)(
        *payload["args"], payload["skip"], lambda i: say(progress_fd, "started", index=i)
    )
    save_calls(found, payload["out"])
    say(progress_fd, "done")


def forked_call(fn: Callable[..., Any], args: tuple, timeout: float = TIMEOUT) -> tuple[bool, Any]:
    """`fn(*args)` (a module-level function; what it returns is saved with torch.save) in a
    forked child, in a case runner too: (True, its result), or (False, how the child ended).
    For the suite's own CPU computations that a CPU kernel may crash (a case's verdict must not
    carry the crash of the suite's measurement)."""
    load = lambda path: torch.load(path, weights_only=False)  # noqa: E731
    end, found = _forked("call_task", fn, {"args": args}, timeout, (), load)
    if end.finished:
        return True, found
    status = end.status
    if os.WIFSIGNALED(status):
        return False, f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return False, f"exit status {os.WEXITSTATUS(status)}"


def call_task(payload: dict, progress_fd: int) -> None:
    """In the forked child: run the function, save what it returned, say "done"."""
    torch.set_num_threads(1)  # no OpenMP pool in a forked child
    torch.save(_function(payload)(*payload["args"]), payload["out"])
    say(progress_fd, "done")


def _forked(
    task: str,
    fn: Callable[..., Any],
    payload: dict,
    timeout: float,
    warm: tuple[str, ...],
    load: Callable[[str], Any],
) -> tuple[TaskEnd, Any]:
    """`task` (a function of this module) run in a forked child on `payload` plus `fn`'s name
    and a file for what it saves: (how it ended, what it saved (`load`) if it finished)."""
    fd, path = tempfile.mkstemp(prefix="conformance-forked-", suffix=".pt")
    os.close(fd)
    read_fd, write_fd = os.pipe()
    payload = {**payload, "fn": f"{fn.__module__}:{fn.__qualname__}", "out": path}
    try:
        with HELD.held():  # torch's warnings about the capture: tallied, not printed
            try:
                child = FORKER.start(f"{__name__}:{task}", payload, write_fd, task, warm)
            finally:
                os.close(write_fd)
            end = read_progress(read_fd, child, timeout)
        return end, (load(path) if end.finished else None)
    finally:
        os.close(read_fd)
        os.unlink(path)


def _function(payload: dict) -> Callable[..., Any]:
    module, _, name = payload["fn"].partition(":")
    return getattr(importlib.import_module(module), name)
