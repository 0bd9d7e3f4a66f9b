"""Runner processes: a child forked by the owner's zygote (harness/zygotes.py) or a fresh
interpreter, that runs collected items on request.

The process that schedules cases (a plain pytest process, or each pytest-xdist worker) keeps a
runner and sends it one command per item (its node id and the next one's); the runner runs the
item with pytest's own protocol and streams the reports back through a pipe, one JSON line per
message (`start`, `report`, `finish`, `missing`). Its stdout and stderr go to a log file, so a
crash leaves its signal message, glibc/sanitizer report and faulthandler's stack there. The
runner serves items until its owner closes it (after a crash, a hang or `--runner-cases` cases).
A replay runner (`replay`) runs a list of items through and sends nothing but their ends: the
culprit search uses it to see whether a sequence of cases crashes.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from conformance.engine.backend import Backend
from conformance.engine.profile import DeviceProfile
from conformance.harness.nodes import case_of
from conformance.processes import launch
from conformance.processes.forking import Child
from conformance.processes.zygote import ZygoteGone, ZygoteLink

# in a spawned runner: {"cmd": fd, "out": fd, "replay": b, "profile": the parent's device profile}
RUNNER_ENV = "_CONFORMANCE_RUNNER"
HEAP_EXERCISE = "<heap exercise>"  # a command that is no item: exercise_heap()
KILL_GRACE = 5.0  # seconds between SIGABRT (stack dump) and SIGKILL of a hung runner


class RunnerProcess:
    """One runner, seen from the process that owns it (os.wait-style `status` once it ended)."""

    def __init__(
        self,
        config: pytest.Config,
        items: list[pytest.Item],
        mode: str,
        *,
        replay: bool = False,
        env: dict[str, str] | None = None,
        backend: Backend | None = None,
        zygote: ZygoteLink | None = None,
        device_lock: Any = None,
        cases: str | None = None,
    ) -> None:
        self.mode = mode
        self.device_lock = device_lock  # released once the runner ended (close)
        log = tempfile.NamedTemporaryFile(prefix="conformance-runner-", suffix=".log", delete=False)
        self.log_path = log.name
        cmd_read, cmd_write = os.pipe()
        out_read, out_write = os.pipe()
        self.popen: subprocess.Popen | None = None
        self.child: Child | None = None
        if mode == "spawn":
            job = {"cmd": cmd_read, "out": out_write, "replay": replay, "cases": cases}
            if backend is not None:  # the child gets the device profile whole, never re-learns it
                job["profile"] = backend.profile.to_json()
            self.popen = launch.spawn(
                "spawned-runner",
                # -q: the log keeps what the cases print and a crash's stack, not the header
                ["-m", "pytest", *runner_args(config), "-q"],
                {**(env or {}), RUNNER_ENV: json.dumps(job)},
                cwd=str(config.invocation_params.dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(cmd_read, out_write),
            )
            self.pid = self.popen.pid
        else:  # forked by the zygote, which gets a link for the runner's own forks
            assert zygote is not None
            link = zygote.new_link()
            try:
                fds = [cmd_read, out_write, log.fileno(), link.fileno()]
                self.child = zygote.fork_runner({"replay": replay}, fds)
            except ZygoteGone:
                for fd in (cmd_read, out_write, cmd_write, out_read):
                    os.close(fd)
                log.close()
                raise
            finally:
                link.close()
            self.pid = self.child.pid
        os.close(cmd_read)
        os.close(out_write)
        log.close()
        self.commands = os.fdopen(cmd_write, "w", buffering=1)
        self.output = os.fdopen(out_read, "rb", buffering=0)
        self._pending = b""
        self._lines: list[bytes] = []
        self.status: int | None = None

    # ---- talking to it -------------------------------------------------------------------------
    def send(self, nodeid: str, next_nodeid: str | None) -> bool:
        """Ask for one item; False if the runner is gone."""
        try:
            self.commands.write(json.dumps([nodeid, next_nodeid]) + "\n")
            self.commands.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def receive(self, timeout: float | None) -> list | None:
        """The next message ([kind, nodeid, data]); None when the runner closed its end (it
        died or exited). Raises TimeoutError past `timeout` seconds."""
        while not self._lines:
            ready, _, _ = select.select([self.output], [], [], timeout)
            if not ready:
                raise TimeoutError
            chunk = self.output.read(65536)
            if not chunk:
                return None
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            self._lines += lines
        return json.loads(self._lines.pop(0))

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # ---- its end -------------------------------------------------------------------------------
    def poll(self) -> int | None:
        if self.status is None:
            if self.popen is not None:
                code = self.popen.poll()
                if code is not None:
                    self.status = (-code) & 0x7F if code < 0 else code << 8
            elif self.child is not None:
                self.status = self.child.poll()
        return self.status

    def wait(self) -> int:
        if self.status is None:
            if self.popen is not None:
                self.popen.wait()
                self.poll()
            elif self.child is not None:
                self.status = self.child.wait()
        assert self.status is not None
        return self.status

    def kill(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """SIGABRT (faulthandler prints every thread's stack into the log), then SIGKILL."""
        self.kill(signal.SIGABRT)
        deadline = time.monotonic() + KILL_GRACE
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill(signal.SIGKILL)

    def close(self) -> int:
        """End it (EOF on its commands lets an idle runner exit) and remove its log."""
        for stream in (self.commands, self.output):
            try:
                stream.close()
            except OSError:
                pass
        deadline = time.monotonic() + KILL_GRACE
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.poll() is None:
            self.kill(signal.SIGKILL)
        status = self.wait()
        if self.device_lock is not None:
            self.device_lock.release()
            self.device_lock = None
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        return status


def runner_args(config: pytest.Config) -> list[str]:
    """The command line of a spawned runner: the user's arguments (an xdist worker has them in
    `mainargv`), without xdist's workers."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        args = list(workerinput.get("mainargv", [])[1:])
    else:
        args = list(config.invocation_params.args)
    if config.pluginmanager.has_plugin("xdist"):
        args += ["-n", "0"]
    return args


def write_case_file(items: list[pytest.Item]) -> str:
    """A file naming the op cases among `items` (the owner's collection), for a spawned runner
    or zygote to collect exactly those: what it would choose anew can differ (the coverage
    account, which a spawned process skips, decides which dtype is an overload's first with
    samples: the one its -inference and -sync cases use)."""
    # once each: a plugin that repeats items (pytest-repeat) would make pytest rename the ids
    ids = list(dict.fromkeys(str(case) for case in map(case_of, items) if case is not None))
    with tempfile.NamedTemporaryFile(
        "w", prefix="conformance-cases-", suffix=".json", delete=False
    ) as f:
        json.dump(ids, f)
    return f.name


# ---- the runner side ----------------------------------------------------------------------------
def spawned_job() -> dict[str, Any]:
    """What a spawned runner or zygote was given by its owner (RUNNER_ENV; {} elsewhere)."""
    return json.loads(os.environ.get(RUNNER_ENV) or "{}")


def spawned_cases() -> list[str] | None:
    """In a spawned runner or zygote: the op case ids its owner collected (None: not given)."""
    path = spawned_job().get("cases")
    if not path:
        return None
    with open(path) as f:
        return json.load(f)


def spawned_profile() -> DeviceProfile | None:
    """In a spawned runner: the device profile its parent learned (None: not given)."""
    data = spawned_job().get("profile")
    return DeviceProfile.from_json(data) if data else None


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
        _die_with_parent()
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
        lazy = _start_lazy_runtime(backend)
        by_id = {item.nodeid: item for item in items}
        commands = os.fdopen(cmd_fd, "r")
        out = os.fdopen(out_fd, "w", buffering=1)
        for line in commands:
            nodeid, next_nodeid = json.loads(line)
            if nodeid == HEAP_EXERCISE:  # the culprit search's "then a trivial allocation"
                _send(out, "start", nodeid)
                exercise_heap()
                _send(out, "finish", nodeid)
                continue
            item = by_id.get(nodeid)
            if item is None:
                _send(out, "missing", nodeid, "[harness] the spawned runner did not collect it")
                continue
            nextitem = by_id.get(next_nodeid) if next_nodeid else None
            _send(out, "start", nodeid)
            passed, lines = True, []
            for report in runtestprotocol(item, log=False, nextitem=nextitem):
                passed = passed and report.passed
                if not replay:
                    data = config.hook.pytest_report_to_serializable(config=config, report=report)
                    lines.append(_line("report", nodeid, data))
            if lazy or not passed:  # the reports leave before the device is asked after them
                _send_lines(out, lines)
                lines = []
            retire = RETIRE if _broken(backend, lazy, passed) else None
            lines.append(_line("finish", nodeid, retire))
            _send_lines(out, lines)  # one write and one wake-up of the owner a case, not five
            if after_case is not None:
                after_case()
    except BaseException:  # noqa: BLE001 - anything here must not run the parent's code
        code = 3
    os._exit(code)


def _die_with_parent() -> None:
    """Be killed when the process that owns this runner dies (Linux PR_SET_PDEATHSIG): a run
    stopped by SIGTERM or a lost xdist worker must not leave a runner computing for minutes (a
    torch_xla graph of 65,537 outputs compiled on for 20 minutes after its run ended)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the runner ends when its command pipe closes
    if os.getppid() != parent:  # the owner died before the request took effect
        os._exit(3)


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


#: the data of a "finish" message that asks for a fresh runner before the next case
RETIRE = "retire"


def _line(kind: str, nodeid: str, data: Any = None) -> str:
    return json.dumps([kind, nodeid, data]) + "\n"


def _send(out, kind: str, nodeid: str, data: Any = None) -> None:
    _send_lines(out, [_line(kind, nodeid, data)])


def _send_lines(out, lines: list[str]) -> None:
    if lines:
        out.write("".join(lines))
        out.flush()
