"""Every fork the suite makes, and the rule they keep: never fork a process that has a thread
besides its main one, or that has touched the device.

A forked child gets a copy of every lock the parent's threads held and none of the threads that
would release them: a device runtime's driver lock (CUDA refuses such a child, other drivers
hang in it), a BLAS thread server's, faulthandler's watchdog (pytest's `faulthandler_timeout`:
the child's `cancel_dump_traceback_later()` waits forever for a thread it does not have). The
processes that schedule cases have threads (an xdist worker: execnet's receiver; numpy's
OpenBLAS server; a runner: the device's), so they never fork themselves: a `Forker` forks
directly only where this process has one thread and no device, and otherwise asks a zygote
(processes/forker.py `Forker`): a fresh interpreter, started with one thread (`QUIET`), that never
touches the device and forks children on request. A case runner gets a link to its zygote when
it is forked; any other process starts a task zygote (CPU work only) the first time it needs
one.
"""

from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass
from typing import Any

from conformance.processes.messages import Message, MessageReader

#: the environment of a process that forks: thread pools that start at import stay off
QUIET = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: a file every fork of the suite appends "site pid threads" to (the self-tests' audit)
AUDIT_ENV = "CONFORMANCE_FORK_AUDIT"


class ForkRefused(RuntimeError):
    """This process may not fork (it has threads, or it touched the device)."""


def threads() -> int:
    """How many threads this process has, native ones included (`/proc/self/task`); 1 where
    that cannot be read."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def thread_names() -> list[str]:
    """The names of this process's threads (`/proc/self/task/*/comm`), for messages."""
    names = []
    try:
        for tid in sorted(os.listdir("/proc/self/task")):
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
    except OSError:
        pass
    return names


def refusal() -> str | None:
    """Why this process may not fork now, or None (the audit file, if set, gets the refusal)."""
    count = threads()
    if count > 1:
        why = f"this process has {count} threads ({', '.join(thread_names())})"
        audit = os.environ.get(AUDIT_ENV)
        if audit:
            with open(audit, "a") as f:
                f.write(f"refused {os.getpid()} {count} {why}\n")
        return why
    return None


def fork(site: str) -> int:
    """`os.fork()` if this process has one thread (else ForkRefused); the audit file, if set,
    gets one line per fork whatever the outcome."""
    count = threads()
    audit = os.environ.get(AUDIT_ENV)
    if audit:
        with open(audit, "a") as f:
            f.write(f"{site} {os.getpid()} {count}\n")
    if count > 1:
        raise ForkRefused(f"{site}: this process has {count} threads ({', '.join(thread_names())})")
    return os.fork()


class Child:
    """A process the suite forked (directly: `status_fd` None, or by a zygote, which writes the
    child's wait status to `status_fd` when it reaps it)."""

    def __init__(self, pid: int, status_fd: int | None = None) -> None:
        self.pid = pid
        self.status_fd = status_fd
        self.status: int | None = None

    def poll(self) -> int | None:
        if self.status is None:
            if self.status_fd is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = status
            elif select.select([self.status_fd], [], [], 0)[0]:
                self._read_status()
        return self.status

    def wait(self, timeout: float | None = None) -> int | None:
        """The wait status (os.waitpid's), or None past `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self.status_fd is None:
                if left is None:
                    self.status = os.waitpid(self.pid, 0)[1]
                else:
                    time.sleep(min(0.005, left))
            else:
                select.select([self.status_fd], [], [], left)
        return self.status

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _read_status(self) -> None:
        assert self.status_fd is not None
        ended = [m for m in MessageReader(self.status_fd).all() if m["kind"] == "ended"]
        os.close(self.status_fd)
        self.status_fd = None
        # no status: the zygote died before it reaped the child, which died with it
        self.status = ended[0]["status"] if ended else signal.SIGKILL


class _Warmed:
    """The functions `warm_up` called in this process."""

    done: set[str] = set()


def warm_up(ref: str) -> None:
    """Call `ref` ("module:name") once in this process."""
    if ref not in _Warmed.done:
        import importlib

        module, _, name = ref.partition(":")
        getattr(importlib.import_module(module), name)()
        _Warmed.done.add(ref)


def run_task(fn: str, payload: Any, progress_fd: int) -> None:
    """In a forked child: `fn(payload, progress_fd)`, then `os._exit` (0 when it returned)."""
    code = 1
    try:
        import faulthandler
        import importlib

        faulthandler.disable()  # a trap in a task is expected and handled: no dump
        module, _, name = fn.partition(":")
        getattr(importlib.import_module(module), name)(payload, progress_fd)
        code = 0
    except BaseException:  # noqa: BLE001 - never run the parent's code in the child
        pass
    os._exit(code)


@dataclass(frozen=True)
class TaskEnd:
    """How a task child ended: what it said (processes/messages.py: `started` with the index of
    what it began, then `done`) and its wait status."""

    said: list[Message]
    status: int

    @property
    def finished(self) -> bool:
        """It said `done` last and exited with 0."""
        done = bool(self.said) and self.said[-1]["kind"] == "done"
        return done and os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0

    @property
    def last_started(self) -> int | None:
        """The index it began last (what it died or hung on, if it did not finish)."""
        started = [m["index"] for m in self.said if m["kind"] == "started"]
        return started[-1] if started else None


def read_progress(fd: int, child: Child, timeout: float) -> TaskEnd:
    """What `child` said on `fd` until it ended (killed past `timeout`), and its status."""
    deadline = time.monotonic() + timeout
    reader, found = MessageReader(fd), []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            break
        try:
            message = reader.receive(min(left, 0.5))
        except TimeoutError:
            if child.poll() is not None and not reader.ready():
                break
            continue
        if message is None:
            break
        found.append(message)
    status = child.wait()
    assert status is not None
    return TaskEnd(found, status)
