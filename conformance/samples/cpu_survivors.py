"""Run generated calls on CPU in a forked child first: keep those CPU survives.

Special values and mixed dtypes are inputs nobody ran before: CPU kernels can trap on them
(`lcm` of INT_MIN: SIGFPE) or loop for ages (a polynomial of degree INT_MAX). The CPU reference
runs inside the process that runs the cases, so such a call would crash or hang that process
and the case would be charged to the backend. One child per batch runs the calls in order and
reports each before it starts; the call it was running when it died or ran out of time is
dropped and the rest are tried again. Raising is fine (errors are compared, not run around).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
import warnings
from collections.abc import Callable

import torch

from conformance.engine.calls import Call, clone_tree

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
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        faulthandler.disable()  # a trap here is expected and handled: no traceback dump
        # the parent's OpenMP pool does not exist in a forked child (libgomp would wait for it
        # forever): one thread runs every parallel region inline
        torch.set_num_threads(1)
        code = 0
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for i, call in enumerate(calls):
                    os.write(write_fd, f"{i}\n".encode())
                    try:
                        run(Call(call.overload, clone_tree(call.args), clone_tree(call.kwargs)))
                    except Exception:
                        pass
                os.write(write_fd, b"done\n")
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    status = None
    while status is None:
        finished, wait_status = os.waitpid(pid, os.WNOHANG)
        if finished:
            status = wait_status
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        else:
            time.sleep(0.002)
    with os.fdopen(read_fd) as pipe:
        lines = pipe.read().split()
    if lines and lines[-1] == "done" and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return len(calls), None
    started = [int(x) for x in lines if x.isdigit()]
    culprit = started[-1] if started else 0
    return culprit, culprit
