"""Run generated calls on CPU in a forked child first: keep those CPU survives.

Special values and mixed dtypes are inputs nobody ran before: CPU kernels can trap on them
(`lcm` of INT_MIN: SIGFPE) or loop for ages (a polynomial of degree INT_MAX). The CPU reference
runs inside the process that runs the cases, so such a call would crash or hang that process
and the case would be charged to the backend. One child per batch runs the calls in order and
reports each before it starts; the call it was running when it died or ran out of time is
dropped and the rest are tried again. Raising is fine (errors are compared, not run around).
"""

from __future__ import annotations

import importlib
import os
import tempfile
import warnings
from collections.abc import Callable

import torch

from conformance.engine.calls import Call, clone_tree, load_calls, save_calls
from conformance.engine.held_stderr import HELD
from conformance.processes.forker import FORKER
from conformance.processes.forking import read_progress
from conformance.processes.messages import say

TIMEOUT = 10.0  # seconds a batch may take on CPU


def survivors(calls: list[Call], run: Callable[[Call], object], timeout: float = TIMEOUT):
    """The calls whose CPU run (`run(call)`) neither crashes nor hangs, in order."""
    pending = list(calls)
    kept: list[Call] = []
    while pending:
        done, culprit = _run_batch(pending, run, timeout)
        kept += pending[:done]
        if culprit is None:
            break
        pending = pending[culprit + 1 :]
    return kept


def _run_batch(calls: list[Call], run, timeout: float) -> tuple[int, int | None]:
    """(calls completed, index of the one that crashed or hung, or None)."""
    fd, path = tempfile.mkstemp(prefix="conformance-survivors-", suffix=".pt")
    os.close(fd)
    read_fd, write_fd = os.pipe()
    try:
        save_calls({"calls": {"calls": calls}}, path)
        payload = {"calls": path, "run": f"{run.__module__}:{run.__qualname__}"}
        with HELD.held():  # torch's warnings about the suite's CPU runs: tallied, not printed
            try:
                child = FORKER.start(f"{__name__}:batch_task", payload, write_fd, "cpu-survivors")
            finally:
                os.close(write_fd)
            end = read_progress(read_fd, child, timeout)
    finally:
        os.close(read_fd)
        os.unlink(path)
    if end.finished:
        return len(calls), None
    culprit = end.last_started or 0
    return culprit, culprit


def batch_task(payload: dict, progress_fd: int) -> None:
    """In the forked child: run the calls in order on CPU, each announced before it runs."""
    # no OpenMP pool in a forked child (libgomp would wait for the parent's forever): one
    # thread runs every parallel region inline
    torch.set_num_threads(1)
    module, _, name = payload["run"].partition(":")
    run = getattr(importlib.import_module(module), name)
    calls = load_calls(payload["calls"])["calls"]["calls"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, call in enumerate(calls):
            say(progress_fd, "started", index=i)
            try:
                run(Call(call.overload, clone_tree(call.args), clone_tree(call.kwargs)))
            except Exception:
                pass
    say(progress_fd, "done")
