"""A runner's side of the runner pipe (harness/runners.py has the owner's): it serves the items
its owner asks for, one `run` message each (processes/messages.py), with pytest's own protocol,
and sends back each item's `start`, its reports and its `finish` (whether the runner should be
retired: a lazy runtime that stopped working, a device a failed case left unusable); a
`heap-exercise` message runs the culprit search's heap exercise, and an `op-trace` message
traces the ops of the cases after it (a crash-site replay, crash_site.py). It never returns: its
process ends with `os._exit` when the owner closes the pipe, or after the finish that asked to
retire it (the items its owner asked for ahead are not run there).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
from collections.abc import Callable
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from conformance.engine.backend import Backend
from conformance.harness.crash_site import start_trace
from conformance.harness.runners import HEAP_EXERCISE, spawned_job
from conformance.processes import messages, zygote
from conformance.processes.messages import MessageReader, encode


def serve_spawned(session: pytest.Session, backend: Backend | None = None) -> None:
    """In a spawned runner (RUNNER_ENV set): serve the collected items; never returns."""
    job = spawned_job()
    config, items = session.config, session.items
    serve(config, items, job["cmd"], job["out"], None, False, job["replay"], backend)


def _start_lazy_runtime(backend: Backend | None) -> bool:
    """On a lazy device, start its runtime before any case: torch_xla 2.9's autograd engine
    sizes its device queues at the first backward, so a CPU backward before the client started
    breaks every later backward on the device (INTERNAL ASSERT device_ready_queues_). Returns
    whether the device is lazy."""
    if backend is None or backend.lazy is None:
        return False
    import torch

    try:
        torch.zeros(1, device=backend.device).cpu()
    except Exception:  # noqa: BLE001 - the cases report a device that cannot start
        pass
    return True


def _broken(backend: Backend | None, lazy: bool, passed: bool) -> bool:
    """After a case: whether the device is unusable in this runner, so that it is retired and
    no later case inherits the failure. A lazy runtime is asked after every case; an eager
    device after a case that did not pass (a sticky error, as CUDA's device-side asserts, makes
    the case that caused it fail: its work ends with a synchronize)."""
    if backend is None:
        return False
    if lazy:
        return not _lazy_runtime_ok(backend)
    return not passed and backend.unusable() is not None


def _lazy_runtime_ok(backend: Backend) -> bool:
    """After a case on a lazy device: whether its runtime still syncs and reads a fresh tensor.
    A graph that failed can leave the runtime unable to run any later one (torch_xla: "Check
    failed: tensor_data"): then the runner is retired, so no later case inherits the failure.
    The sync also runs the pending graph of every tensor still alive, so none is left for the
    next case to run. Only when that fails is the failed case's garbage collected and the check
    tried again: what pytest keeps for post-mortem debugging (`sys.last_*`) and reference cycles
    hold its tensors alive. (A full collection costs 10-25 ms over a runner's heap: paid after
    every case it was a fifth of a torch_xla run.)"""
    if backend.unusable() is None:
        return True
    import gc
    import sys

    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()
    return backend.unusable() is None


def serve(
    config: pytest.Config,
    items: list[pytest.Item],
    cmd_fd: int,
    out_fd: int,
    log_fd: int | None,
    forked: bool,
    replay: bool,
    backend: Backend | None = None,
    after_case: Callable[[], None] | None = None,
) -> None:
    """Run the items asked for on `cmd_fd` until EOF (`backend`: the one under test, whose lazy
    runtime, if any, is started first and checked after each case; `after_case`: called after
    each case's finish was sent)."""
    code = 0
    try:
        zygote.die_with_parent()  # a lost owner leaves no runner computing
        if forked:
            import torch

            torch.set_num_threads(1)  # an OpenMP pool inherited through fork() would hang
        capman = config.pluginmanager.getplugin("capturemanager")
        if capman is not None:  # the runner's output goes to its log, not pytest's capture
            from _pytest.capture import _get_multicapture

            capman.stop_global_capturing()
            capman._global_capturing = _get_multicapture("no")
            capman._global_capturing.start_capturing()
        if log_fd is not None:
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
        faulthandler.enable(file=2, all_threads=True)  # Python stacks of a crash into the log
        config.pluginmanager.register(TearDownFirst(), "conformance-teardown-first")
        serving = _Serving(config, items, out_fd, replay, backend, after_case)
        commands = MessageReader(cmd_fd)
        while not serving.retired and (message := commands.receive()) is not None:
            messages.dispatch(serving, message)
    except BaseException:  # noqa: BLE001 - anything here must not run the parent's code
        code = 3
    os._exit(code)


def exercise_heap() -> None:
    """Allocate and free blocks of every small size class, then consolidate the heap: glibc
    checks the chunks and free lists it walks, so memory an earlier case corrupted makes this
    abort ("unaligned tcache chunk detected", "corrupted size vs. prev_size", ...), and an
    intact heap passes it silently."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    sizes = [8 * k for k in range(1, 130)] + [2048, 4096, 8192, 65536, 262144]
    for _ in range(3):
        blocks = [libc.malloc(n) for n in sizes for _ in range(4)]
        for b in blocks[::2] + blocks[1::2]:
            libc.free(b)
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


class TearDownFirst:
    """A runner's plugin: before an item's setup, what the runner's previous item left set up
    that this item does not share is torn down, as that item's teardown would have with this
    one as its next. The owner's hint of the next item names the next collected one, which
    another runner may run (harness/lanes.py), and pytest sets an item up only on what the
    previous one left that it shares ("previous item was not torn down properly"). It runs in
    the item's setup, so a fixture teardown that fails, crashes or hangs there is this case's
    setup error, crash or hang (with a note naming it): seen and recorded, never lost."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        state = item.session._setupstate
        if not state.stack or list(state.stack) == item.listchain()[: len(state.stack)]:
            return
        try:
            state.teardown_exact(item)
        except Exception as exc:
            exc.add_note(
                "[conformance] raised while tearing down what the runner's previous case set "
                "up and this case does not share (a fixture of an earlier case's module or "
                "class), before this case's setup"
            )
            raise


class _Serving:
    """A runner's handler of its owner's commands (processes/messages.py)."""

    def __init__(
        self,
        config: pytest.Config,
        items: list[pytest.Item],
        out_fd: int,
        replay: bool,
        backend: Backend | None,
        after_case: Callable[[], None] | None,
    ) -> None:
        self.config, self.out, self.replay, self.backend = config, out_fd, replay, backend
        self.after_case = after_case
        self.lazy = _start_lazy_runtime(backend)
        self.by_id = {item.nodeid: item for item in items}
        # it asked to be replaced: what its owner asked ahead would run on a broken runtime
        self.retired = False
        self.trace: Any = None  # the op trace of a crash-site replay (crash_site.py)

    def on_heap_exercise(self) -> None:
        """The culprit search's "then a trivial allocation"."""
        messages.say(self.out, "start", nodeid=HEAP_EXERCISE)
        exercise_heap()
        messages.say(self.out, "finish", nodeid=HEAP_EXERCISE, retire=False)

    def on_op_trace(self, path: str) -> None:
        """The crash-site replay's op trace, for every case after it (crash_site.py)."""
        backend = self.backend
        wait = backend.eager_synchronize() if backend is not None and not self.lazy else None
        self.trace = start_trace(path, wait)

    def on_run(self, nodeid: str, next: str | None) -> None:  # noqa: A002 - the message's field
        """Run one item with pytest's protocol; its reports, then its finish."""
        item = self.by_id.get(nodeid)
        if item is None:
            reason = "[harness] the spawned runner did not collect it"
            messages.say(self.out, "missing", nodeid=nodeid, reason=reason)
            return
        nextitem = self.by_id.get(next) if next else None
        messages.say(self.out, "start", nodeid=nodeid)
        config, passed, out = self.config, True, []
        for report in runtestprotocol(item, log=False, nextitem=nextitem):
            passed = passed and report.passed
            if not self.replay:
                data = config.hook.pytest_report_to_serializable(config=config, report=report)
                out.append(encode("report", nodeid=nodeid, report=data))
        if self.lazy or not passed:  # the reports leave before the device is asked after them
            messages.send(self.out, *out)
            out = []
        retire = self.retired = _broken(self.backend, self.lazy, passed)
        out.append(encode("finish", nodeid=nodeid, retire=retire))
        messages.send(self.out, *out)  # one write and one wake-up of the owner a case, not five
        if self.after_case is not None:
            self.after_case()
