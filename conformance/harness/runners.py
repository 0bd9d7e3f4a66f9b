"""Runner processes, seen from their owner: a child forked by the owner's zygote
(harness/zygotes.py) or a fresh interpreter, that runs collected items on request.

The process that schedules cases (a plain pytest process, or each pytest-xdist worker) keeps a
runner and sends it one command per item (its node id and the next one's); the runner runs the
item (harness/serving.py) and streams the reports back through a pipe (processes/messages.py:
`run`, `heap-exercise` and `op-trace` one way; `start`, `report`, `finish`, `missing` back,
gathered by an `Attempt`). Its stdout and stderr go to a log file, so a crash leaves its
signal message, glibc/sanitizer report and faulthandler's stack there. The runner serves items
until its owner closes it (after a crash, a hang or `--runner-cases` cases). A replay runner
(`replay`) runs a list of items through and sends nothing but their ends: the culprit search
uses it to see whether a sequence of cases crashes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.engine.backend import Backend
from conformance.engine.profile import DeviceProfile
from conformance.harness.nodes import RECORD_PROPERTY, case_of
from conformance.processes import launch, messages
from conformance.processes.forking import Child
from conformance.processes.messages import Message, MessageReader, encode
from conformance.processes.zygote import ZygoteGone, ZygoteLink

# in a spawned runner: {"cmd": fd, "out": fd, "replay": b, "profile": the parent's device profile}
RUNNER_ENV = "_CONFORMANCE_RUNNER"
HEAP_EXERCISE = "<heap exercise>"  # a command that is no item: serving.exercise_heap()
KILL_GRACE = 5.0  # seconds between SIGABRT (stack dump) and SIGKILL of a hung runner


#: what the pipes of a runner asked many cases ahead hold: its reports pipe, before the runner
#: waits on its owner (those cases' reports wait there until their turn: harness/lanes.py), and
#: its commands pipe, so asking never waits on a runner that waits on its owner
PIPE_BYTES = 1 << 20
#: the cases a runner whose pipes could not be enlarged may be asked ahead: their commands
#: (two node ids, under 600 bytes) fit a default 64 KiB pipe, so asking never waits
PLAIN_PIPE_AHEAD = 64
#: what a passing case's messages to its owner take in its reports pipe, at least (start, three
#: reports, finish: 2-3 KB); past what the pipe holds, the runner only waits for its owner
CASE_REPORT_BYTES = 2048


def _enlarge(fd: int, size: int) -> bool:
    """Whether the pipe of `fd` holds `size` bytes now (Linux: F_SETPIPE_SZ, up to
    /proc/sys/fs/pipe-max-size and the user's pipe-user-pages limits); elsewhere, or past
    those limits, it keeps its size."""
    with contextlib.suppress(AttributeError, OSError):
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size) >= size
    return False


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
        pipe_bytes: int = 0,
    ) -> None:
        self.mode = mode
        self.device_lock = device_lock  # released once the runner ended (close)
        log = tempfile.NamedTemporaryFile(prefix="conformance-runner-", suffix=".log", delete=False)
        self.log_path = log.name
        cmd_read, cmd_write = os.pipe()
        out_read, out_write = os.pipe()
        # the cases it may be asked ahead of the one it runs: enlarged, its pipes hold about
        # the reports of that many passing cases and their commands many times over
        self.most_ahead = PLAIN_PIPE_AHEAD
        if pipe_bytes and _enlarge(out_write, pipe_bytes) and _enlarge(cmd_write, pipe_bytes):
            self.most_ahead = pipe_bytes // CASE_REPORT_BYTES
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
        self.commands: int | None = cmd_write
        self.output = MessageReader(out_read)
        self.status: int | None = None

    # ---- talking to it -------------------------------------------------------------------------
    def send(self, nodeid: str, next_nodeid: str | None) -> bool:
        """Ask for one item (or the heap exercise: `HEAP_EXERCISE`); False if the runner is
        gone."""
        if nodeid == HEAP_EXERCISE:
            return self._command(encode("heap-exercise"))
        return self._command(encode("run", nodeid=nodeid, next=next_nodeid))

    def trace_ops(self, path: str) -> bool:
        """Ask it to trace the ops of every case after this into `path` (crash_site.py); False
        if the runner is gone."""
        return self._command(encode("op-trace", path=path))

    def _command(self, message: bytes) -> bool:
        try:
            if self.commands is None:
                return False
            messages.send(self.commands, message)
            return True
        except OSError:
            return False

    def receive(self, timeout: float | None) -> Message | None:
        """The next message (`start`, `report`, `finish` or `missing`, each with its `nodeid`);
        None when the runner closed its end (it died or exited). Raises TimeoutError past
        `timeout` seconds."""
        return self.output.receive(timeout)

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
        for fd in (self.commands, self.output.fd):
            try:
                if fd is not None and fd >= 0:
                    os.close(fd)
            except OSError:
                pass
        self.commands, self.output.fd = None, -1
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


@dataclass
class Attempt:
    """What one runner sent back for one item (the handler of its messages): its
    reports and how the exchange ended ("finished", "died", "hung" or "missing"; `retire`: the
    runner asks to be replaced; `reason`: why it is missing)."""

    end: str = ""
    started: bool = False
    reports: list[pytest.TestReport] = field(default_factory=list)
    retire: bool = False
    reason: str = ""
    item: pytest.Item | None = None
    config: pytest.Config | None = None

    def on_start(self, nodeid: str) -> None:
        self.started = True
        if self.item is not None:
            self.item.ihook.pytest_runtest_logstart(nodeid=nodeid, location=self.item.location)

    def on_report(self, nodeid: str, report: dict) -> None:
        assert self.config is not None
        hook = self.config.hook
        self.reports.append(hook.pytest_report_from_serializable(config=self.config, data=report))

    def on_finish(self, nodeid: str, retire: bool) -> None:
        self.end, self.retire = "finished", retire

    def on_missing(self, nodeid: str, reason: str) -> None:
        self.end, self.reason = "missing", reason

    def log(self, item: pytest.Item) -> None:
        """Log the reports as if this process had run the item."""
        for report in self.reports:
            if isinstance(report.longrepr, list):  # JSON turned pytest's tuple into a list
                report.longrepr = tuple(report.longrepr)
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def note(self, text: str) -> None:
        """Add a note to the record the reports carry (shown as `[note] ...` if it has no
        message)."""
        for report in self.reports:
            for i, (name, data) in enumerate(report.user_properties):
                if name == RECORD_PROPERTY and isinstance(data, dict):
                    data = dict(data)
                    data["notes"] = [*data.get("notes", []), text]
                    data["message"] = data.get("message") or f"[note] {text}"
                    report.user_properties[i] = (name, data)


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
