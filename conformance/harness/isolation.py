"""Crash and hang isolation without pytest-xdist: cases run in a child process that streams its
reports back; a crash or a hang costs one case.

The pytest process starts a runner for the remaining items: a forked child (fast: it inherits
the collected session) or, for devices that refuse use in a forked child once initialised (as
CUDA does), a fresh interpreter that collects the same items (`spawn`; see `plan_isolation`).
The runner streams each item's reports through a pipe; the parent logs them (terminal,
results, JUnit) as if it had run them. If the runner dies (SIGSEGV, abort, sanitizer exit) the
case it was running is `crashed`, with the signal and the tail of its output; if a case runs
past `--case-timeout` the parent stops the runner (SIGABRT first, so faulthandler prints where
it hung) and the case is `hung`. Then a new runner continues with the next case. After a failed
case the runner also hands over to a fresh one, so memory it may have corrupted is never
blamed on a later case. The parent never touches the device: usability is probed in a child.
"""

from __future__ import annotations

import faulthandler
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from _pytest.runner import runtestprotocol

from conformance.record import Status

if TYPE_CHECKING:
    from conformance.engine.probe import Probe
    from conformance.harness.session import ConformanceRun

CRASH_TAIL_LINES = 40
STACK_LINES = 25  # of a faulthandler dump: the innermost frames
RUNNER_ENV = "_CONFORMANCE_RUNNER"  # set in a spawned runner: {"fd": .., "ids": .., "start": ..}
KILL_GRACE = 5.0  # seconds between SIGABRT (stack dump) and SIGKILL of a hung runner


@dataclass
class Plan:
    """How the cases of this process run, and what the device probe found."""

    mode: str  # "fork", "spawn", "in-process" (xdist worker, --isolate none), "xdist"
    probe: Probe
    reason: str = ""  # why this mode, when it is not the obvious one

    def describe(self, timeout: float) -> str:
        what = {
            "fork": "each case batch in a forked child (a crash or hang costs one case)",
            "spawn": "each case batch in a fresh interpreter (a crash or hang costs one case)",
            "in-process": "in-process (a crash or hang ends the run)",
            "xdist": "in pytest-xdist workers (a crash or hang costs one case)",
        }[self.mode]
        limit = f"{timeout:g} s per case" if timeout else "none"
        text = f"isolation: {what}; time limit: {limit}"
        return text + (f" [{self.reason}]" if self.reason else "")


def plan_isolation(run: ConformanceRun) -> Plan:
    """Choose how cases run and probe the device, never initialising it in a process that
    forks case runners later. Raises UsageError (one line) for an unusable device."""
    from conformance.engine.probe import probe_here, probe_in_fork, probe_in_fresh_process
    from conformance.harness.session import Role

    suite = run.suite
    backend = suite.backend
    isolate = suite.options.isolate
    role = run.role
    if role in (Role.XDIST_WORKER, Role.SPAWNED_RUNNER) or (
        role is Role.SINGLE and isolate == "none"
    ):
        return _usable(Plan("in-process", probe_here(backend)), backend)
    mode = "xdist" if role is Role.XDIST_CONTROLLER else "fork"
    if role is Role.SINGLE and isolate == "spawn":
        return _usable(Plan("spawn", probe_in_fresh_process(backend)), backend)
    if _initialised(backend):
        reason = (
            f"torch.{backend.device_type}.is_initialized() is True before any case ran: a "
            "forked child could not use the device"
        )
        if mode == "fork" and isolate == "fork":
            raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
        return _usable(
            Plan("spawn" if mode == "fork" else mode, probe_in_fresh_process(backend), reason),
            backend,
        )
    probe = probe_in_fork(backend)
    if probe.usable:
        return Plan(mode, probe)
    fresh = probe_in_fresh_process(backend)
    if not fresh.usable:
        return _usable(Plan(mode, fresh), backend)
    reason = f"the device refused use in a forked child ({probe.error})"
    if mode == "fork" and isolate == "fork":
        raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
    return Plan("spawn" if mode == "fork" else mode, fresh, reason)


def _initialised(backend) -> bool:
    fn = backend.device_function("is_initialized")
    try:
        return bool(fn()) if callable(fn) else False
    except Exception:  # noqa: BLE001 - a failing query is no evidence of initialisation
        return False


def _usable(plan: Plan, backend) -> Plan:
    if not plan.probe.usable:
        raise pytest.UsageError(
            f"backend '{backend.module_name}' registered device '{backend.device_type}' but it "
            f"is not usable ({plan.probe.error}, probed in a {plan.probe.where}); check the "
            "backend, or pass --device"
        )
    return plan


# ---- the parent ---------------------------------------------------------------------------------
def run_isolated(session: pytest.Session, run: ConformanceRun) -> None:
    """Run every collected item in runner processes; returns when all ran or the run stops."""
    items = session.items
    start = 0
    while start < len(items) and not (session.shouldstop or session.shouldfail):
        if run.plan.mode == "fork" and _initialised(run.suite.backend):
            run.switch_to_spawn(
                f"torch.{run.suite.backend.device_type}.is_initialized() became True in the "
                "pytest process: forked children could not use the device"
            )
        start = _run_runner(session, run, items, start)


class _Process:
    """A runner process: a forked child (pid) or a spawned one (Popen); os.wait-style status."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None) -> None:
        self.pid = pid
        self.popen = popen
        self.status: int | None = None

    def poll(self) -> int | None:
        if self.status is None:
            if self.popen is not None:
                code = self.popen.poll()
                if code is not None:
                    self.status = (-code) & 0x7F if code < 0 else code << 8
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = status
        return self.status

    def wait(self) -> int:
        if self.status is None:
            if self.popen is not None:
                self.popen.wait()
                self.poll()
            else:
                self.status = os.waitpid(self.pid, 0)[1]
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


def _run_runner(
    session: pytest.Session, run: ConformanceRun, items: list[pytest.Item], start: int
) -> int:
    config = session.config
    log = tempfile.NamedTemporaryFile(prefix="conformance-runner-", suffix=".log", delete=False)
    read_fd, write_fd = os.pipe()
    if run.plan.mode == "spawn":
        popen = _spawn(config, items, start, write_fd, log)
        process = _Process(popen.pid, popen)
    else:
        pid = os.fork()
        if pid == 0:  # child: never returns
            run.forked_child = True
            os.close(read_fd)
            _runner(config, items[start:], start, write_fd, log.fileno(), forked=True)
        process = _Process(pid)
    os.close(write_fd)
    log.close()
    limit = run.suite.options.case_timeout
    running: int | None = None
    started_at = time.monotonic()  # of the running case, else of the last message
    finished = start
    restart = hung = started_any = False
    pending = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        stop = False
        while not stop:
            # a case may run `limit` seconds; so may the runner between cases (its start-up,
            # collection in a spawned runner, teardown)
            wait = max(0.0, started_at + limit - time.monotonic()) if limit else None
            ready, _, _ = select.select([pipe], [], [], wait)
            if not ready:
                hung = True
                process.stop()
                break
            chunk = pipe.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                kind, index, data = json.loads(line)
                item = items[index]
                if kind == "start":
                    running, started_at = index, time.monotonic()
                    started_any = True
                    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
                elif kind == "report":
                    report = config.hook.pytest_report_from_serializable(config=config, data=data)
                    if isinstance(report.longrepr, list):  # JSON turned pytest's tuple into a list
                        report.longrepr = tuple(report.longrepr)
                    item.ihook.pytest_runtest_logreport(report=report)
                elif kind == "missing":
                    _report_problem(run, item, Status.ERROR, "harness", data, started=False)
                    finished = index + 1
                elif kind == "restart":
                    restart = True
                elif kind == "finish":
                    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
                    running, finished = None, index + 1
                    started_at = time.monotonic()
                if session.shouldstop or session.shouldfail:
                    process.kill(signal.SIGKILL)
                    stop = True
                    break
    status = process.wait()
    stopping = session.shouldstop or session.shouldfail
    clean_restart = restart and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    if hung and started_any:  # in a case, or between two: the next one is blamed
        blamed = running if running is not None else finished
        message = (
            f"[hang] the case ran past its time limit of {limit:g} s (--case-timeout); its "
            "process was stopped"
        )
        _, detail = diagnose(_read(log.name))
        _report_problem(
            run, items[blamed], Status.HUNG, "hang", message, detail, started=running is not None
        )
        finished = blamed + 1
    elif not stopping and not started_any and not clean_restart and finished < len(items):
        # the runner never got to a case: a harness failure, not a verdict on any case
        headline, detail = diagnose(_read(log.name))
        first = next((ln for ln in _read(log.name).splitlines() if ln.strip()), "")
        how = f"started no case within {limit:g} s" if hung else describe_status(status)
        message = (
            f"[harness] the {run.plan.mode} case runner {how} before running a case: "
            f"{headline or first}"
        )
        _report_problem(
            run, items[finished], Status.ERROR, "harness", message, detail, started=False
        )
        session.shouldstop = message
        finished += 1
    elif not stopping and not clean_restart and finished < len(items):
        # the runner died in a case (or between two: blame the next one)
        crashed = running if running is not None else finished
        _report_crash(run, items[crashed], status, log.name, started=running is not None)
        finished = crashed + 1
    os.unlink(log.name)
    return finished


def _spawn(
    config: pytest.Config, items: list[pytest.Item], start: int, write_fd: int, log: Any
) -> subprocess.Popen:
    """A fresh `python -m pytest` with the same arguments that runs items[start:] by node id."""
    ids = tempfile.NamedTemporaryFile("w", prefix="conformance-ids-", suffix=".json", delete=False)
    with ids:
        json.dump([item.nodeid for item in items[start:]], ids)
    job = {"fd": write_fd, "ids": ids.name, "start": start}
    return subprocess.Popen(
        # -q: the log keeps what the cases print and a crash's stack, not the header
        [sys.executable, "-m", "pytest", *config.invocation_params.args, "-q"],
        cwd=str(config.invocation_params.dir),
        env={**os.environ, RUNNER_ENV: json.dumps(job)},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
    )


# ---- a runner ---------------------------------------------------------------------------------
def run_spawned_runner(session: pytest.Session) -> None:
    """In a spawned runner (RUNNER_ENV set): run the items the parent listed, never return."""
    job = json.loads(os.environ[RUNNER_ENV])
    with open(job["ids"]) as f:
        wanted = json.load(f)
    os.unlink(job["ids"])
    by_id = {item.nodeid: item for item in session.items}
    items = [by_id.get(nodeid) for nodeid in wanted]
    _runner(session.config, items, job["start"], job["fd"], None, forked=False)


def _runner(
    config, items: list, first: int, write_fd: int, log_fd: int | None, forked: bool
) -> None:
    code = 0
    try:
        if forked:
            import torch

            torch.set_num_threads(1)  # an OpenMP pool inherited through fork() would hang
        capman = config.pluginmanager.getplugin("capturemanager")
        if capman is not None:  # the runner's output goes to the crash log, not pytest's capture
            from _pytest.capture import _get_multicapture

            capman.stop_global_capturing()
            capman._global_capturing = _get_multicapture("no")
            capman._global_capturing.start_capturing()
        if log_fd is not None:
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
        faulthandler.enable(file=2, all_threads=True)  # Python stacks of a crash into the log
        out = os.fdopen(write_fd, "w", buffering=1)
        for k, item in enumerate(items):
            index = first + k
            if item is None:
                _send(
                    out, "missing", index, "[harness] the spawned runner did not collect this case"
                )
                continue
            following = [i for i in items[k + 1 :] if i is not None]
            nextitem = following[0] if following else None
            _send(out, "start", index)
            failed = False
            for report in runtestprotocol(item, log=False, nextitem=nextitem):
                failed = failed or report.failed
                data = config.hook.pytest_report_to_serializable(config=config, report=report)
                _send(out, "report", index, data)
            if failed and nextitem is not None:
                # a failed case may have corrupted this process (heap, device memory): the
                # next case starts in a fresh runner, so damage is never blamed on it
                _send(out, "restart", index)
            _send(out, "finish", index)
            if failed:
                break
    except BaseException:  # noqa: BLE001 - anything here must not run the parent's code
        code = 3
    os._exit(code)


def _send(out, kind: str, index: int, data: Any = None) -> None:
    out.write(json.dumps([kind, index, data]) + "\n")
    out.flush()


# ---- diagnosis ----------------------------------------------------------------------------------
def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exited with code {os.WEXITSTATUS(status)}"


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
GLIBC_MARKERS = (
    "free(): ",
    "malloc(): ",
    "double free",
    "corrupted ",
    "realloc(): ",
    "munmap_chunk(): ",
    "malloc_consolidate(): ",
)


def diagnose(text: str) -> tuple[str | None, str]:
    """(headline, detail) from a crashed child's output: the sanitizer or glibc message if any,
    the sanitizer report (or the output's tail) as detail."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if any(m in line for m in SANITIZER_MARKERS):
            end = next(
                (j for j in range(i, len(lines)) if lines[j].startswith("SUMMARY:")),
                min(len(lines) - 1, i + 60),
            )
            headline = _clean(line.split("ERROR: ", 1)[-1])
            return headline, "\n".join(lines[i : end + 1])
    detail = _python_stack(lines) or "\n".join(lines[-CRASH_TAIL_LINES:])
    for line in lines:
        if any(line.startswith(m) or m in line[:40] for m in GLIBC_MARKERS):
            return _clean(line), detail
    return None, detail


def _python_stack(lines: list[str]) -> str:
    """faulthandler's dump (innermost frame first), cut to the frames near the fault: the tail
    of a dump is only pytest and runpy."""
    starts = [
        i for i, ln in enumerate(lines) if ln.startswith(("Fatal Python error", "Current thread"))
    ]
    if not starts:
        return ""
    first = starts[0]
    before = lines[max(0, first - 10) : first]  # what the process printed last
    stack = [ln for ln in lines[first:] if not ln.startswith("Extension modules:")]
    return "\n".join([*before, *stack[:STACK_LINES]])


def _clean(line: str) -> str:
    """glibc prints no newline before faulthandler's 'Fatal Python error'."""
    return line.split("Fatal Python error")[0].strip()


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _report_crash(
    run: ConformanceRun, item: pytest.Item, status: int, log_path: str, started: bool
) -> None:
    how = describe_status(status)
    headline, detail = diagnose(_read(log_path))
    message = f"[crash] the process {how} while running this case"
    if headline:
        message += f": {headline}"
    _report_problem(run, item, Status.CRASHED, "crash", message, detail, started=started)


def _report_problem(
    run: ConformanceRun,
    item: pytest.Item,
    status: Status,
    check: str,
    message: str,
    detail: str = "",
    *,
    started: bool,
) -> None:
    """Log a failed report for `item` that its runner could not send (crash, hang, harness)."""
    if not started:
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    longrepr = message + ("\n--- output ---\n" + detail if detail else "")
    record = run.record_for(item, status, check=check, message=longrepr)
    properties = [] if record is None else [("conformance", record.to_json())]
    report = pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={},
        outcome="failed",
        longrepr=longrepr,
        when="call",
        user_properties=properties,
    )
    item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
