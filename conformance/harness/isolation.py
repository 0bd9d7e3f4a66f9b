"""Crash isolation without pytest-xdist: cases run in a forked child, a crash costs one case.

The pytest process forks a child that runs the remaining items and streams their reports back
through a pipe; the parent logs them (terminal, results, JUnit) as if it had run them. If the
child dies (SIGSEGV, abort, sanitizer exit), the case it was running is reported as `crashed`
with the signal and the tail of its output, and a new child continues with the next case.
After a failed case the child also hands over to a fresh one, so memory it may have
corrupted is never blamed on a later case.
Under pytest-xdist this is not needed: xdist replaces a crashed worker and reports the case.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import tempfile
from typing import TYPE_CHECKING

import pytest
from _pytest.runner import runtestprotocol

from conformance.record import Status

if TYPE_CHECKING:
    from conformance.harness.session import ConformanceRun

CRASH_TAIL_LINES = 40


def run_isolated(session: pytest.Session, run: ConformanceRun) -> None:
    """Run every collected item in forked children; returns when all ran or the run stops."""
    items = session.items
    start = 0
    while start < len(items) and not (session.shouldstop or session.shouldfail):
        start = _run_child(session, run, items, start)


def _run_child(
    session: pytest.Session, run: ConformanceRun, items: list[pytest.Item], start: int
) -> int:
    config = session.config
    log = tempfile.NamedTemporaryFile(prefix="conformance-child-", suffix=".log", delete=False)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        run.forked_child = True
        os.close(read_fd)
        _child(session, items, start, write_fd, log.fileno())
    os.close(write_fd)
    log.close()
    running: int | None = None
    finished = start
    restart = False
    with os.fdopen(read_fd) as pipe:
        for line in pipe:
            kind, index, data = json.loads(line)
            item = items[index]
            if kind == "start":
                running = index
                item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            elif kind == "report":
                report = config.hook.pytest_report_from_serializable(config=config, data=data)
                if isinstance(report.longrepr, list):  # JSON turned pytest's tuple into a list
                    report.longrepr = tuple(report.longrepr)
                item.ihook.pytest_runtest_logreport(report=report)
            elif kind == "restart":
                restart = True
            elif kind == "finish":
                item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
                running, finished = None, index + 1
                if session.shouldstop or session.shouldfail:
                    os.kill(pid, signal.SIGKILL)
                    break
    _, status = os.waitpid(pid, 0)
    stopping = session.shouldstop or session.shouldfail
    clean_restart = restart and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    if not stopping and not clean_restart and finished < len(items):
        # the child died in a case (or between two: blame the next one)
        crashed = running if running is not None else finished
        _report_crash(run, items[crashed], status, log.name, started=running is not None)
        finished = crashed + 1
    os.unlink(log.name)
    return finished


def _child(session: pytest.Session, items, start: int, write_fd: int, log_fd: int) -> None:
    config = session.config
    code = 0
    try:
        import torch

        torch.set_num_threads(1)  # an OpenMP pool inherited through fork() would hang
        capman = config.pluginmanager.getplugin("capturemanager")
        if capman is not None:  # the child's output goes to the crash log, not pytest's capture
            from _pytest.capture import _get_multicapture

            capman.stop_global_capturing()
            capman._global_capturing = _get_multicapture("no")
            capman._global_capturing.start_capturing()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        faulthandler.enable(file=2, all_threads=False)  # Python stack of a crash into the log
        out = os.fdopen(write_fd, "w", buffering=1)
        for index in range(start, len(items)):
            item = items[index]
            nextitem = items[index + 1] if index + 1 < len(items) else None
            out.write(json.dumps(["start", index, None]) + "\n")
            out.flush()
            failed = False
            for report in runtestprotocol(item, log=False, nextitem=nextitem):
                failed = failed or report.failed
                data = config.hook.pytest_report_to_serializable(config=config, report=report)
                out.write(json.dumps(["report", index, data]) + "\n")
            if failed and nextitem is not None:
                # a failed case may have corrupted this process (heap, device memory): the
                # next case starts in a fresh child, so damage is never blamed on it
                out.write(json.dumps(["restart", index, None]) + "\n")
            out.write(json.dumps(["finish", index, None]) + "\n")
            out.flush()
            if failed:
                break
    except BaseException:  # noqa: BLE001 - anything here must not run the parent's code
        code = 3
    os._exit(code)


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
    for line in lines:
        if any(line.startswith(m) or m in line[:40] for m in GLIBC_MARKERS):
            return _clean(line), "\n".join(lines[-CRASH_TAIL_LINES:])
    return None, "\n".join(lines[-CRASH_TAIL_LINES:])


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
    if not started:
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    how = describe_status(status)
    headline, detail = diagnose(_read(log_path))
    message = f"[crash] the process {how} while running this case"
    if headline:
        message += f": {headline}"
    longrepr = message + ("\n--- output ---\n" + detail if detail else "")
    record = run.record_for(item, Status.CRASHED, check="crash", message=longrepr)
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
