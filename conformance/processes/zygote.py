"""A zygote: a process that forks children on request and does nothing else.

A task zygote starts as a fresh interpreter with one thread (processes/forking.py `QUIET`) and
imports torch; a runner zygote is forked from the scheduling process while that has one thread
and has not touched the device, else it too is a fresh interpreter (harness/zygotes.py; it
holds the backend and the collected items; processes/kinds.py has both rows). Either never
touches the device and never runs a case, so every child it forks starts from a clean copy:
no thread, no watchdog, no device state. Before it forks a runner, a runner zygote imports the
modules an earlier runner reported it had to import (`LazyImports`), so that each later runner
starts with them. Requests
arrive on links (Unix SOCK_SEQPACKET sockets: one message a packet, processes/messages.py, file
descriptors passed with it), each handled by the server's `on_<kind>`; the reply (`forked` with
the child's pid, or `refused`) comes back on the link, and the child's wait status (`ended`) is
written to the status pipe sent with the request when the zygote reaps it. The zygote ends when
its last link closes, and with the process that started it.

    task {fn: "module:name", payload, warm: ["module:name", ...], path}
                                                         fds: progress, the asker's stderr, status
    runner {job}                                         fds: runner's (harness/runners.py), status
    adopt                                                fds: a new link (a spawned runner's)
    task-link                                            reply: `link`, fds: a task zygote's link
    imported {modules}                                   (no reply; from a runner: LazyImports)
"""

from __future__ import annotations

import base64
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from conformance.processes import forking, launch, messages
from conformance.processes.messages import receive_packet, send_packet

#: `python -m conformance.processes.zygote FD`: the modules a task zygote imports before forking
TASK_MODULES = ("torch", "conformance.engine.calls", "conformance.samples.values")
#: a task zygote's CPU work sees no accelerator: torch's testing internals (OpInfo's op_db,
#: imported to capture samples) initialise CUDA's driver where a GPU is visible (common_cuda's
#: SM*OrLater) and ask an autoloaded PrivateUse1 backend's `is_available()` (common_utils'
#: TEST_PRIVATEUSE1: an OpenCL ICD such as pocl starts its device threads there); either
#: driver's threads would stop the zygote from forking, and every capture would import op_db
#: again (5-10 s each). Captures then match a CPU machine's
HIDDEN_ACCELERATORS = {
    "CUDA_VISIBLE_DEVICES": "",
    "HIP_VISIBLE_DEVICES": "",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",  # torch >= 2.5's `torch.backends` entry points
}


class ZygoteGone(RuntimeError):
    """The zygote ended (or refused): `str()` says why."""


def link_pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


class ZygoteLink:
    """The asking side of one link."""

    def __init__(self, sock: socket.socket, owner: Any = None) -> None:
        self.sock = sock
        self.owner = owner  # what keeps the zygote's process (its Popen), if this side started it

    def request(self, kind: str, fds: list[int], **fields: Any) -> forking.Child:
        """Ask for a child (`task` or `runner`): the zygote replies `forked` or `refused`."""
        status_r, status_w = os.pipe()
        try:
            send_packet(self.sock, kind, [*fds, status_w], **fields)
            reply, _ = receive_packet(self.sock)
        except OSError as exc:
            os.close(status_r)
            raise ZygoteGone(f"the zygote is gone ({exc})") from None
        finally:
            os.close(status_w)
        if reply is None:
            os.close(status_r)
            raise ZygoteGone("the zygote is gone")
        try:
            return messages.dispatch(_Reply(status_r), reply)
        except ZygoteGone:
            os.close(status_r)
            raise

    def fork_task(
        self, fn: str, payload: Any, progress_fd: int, warm: tuple[str, ...] = ()
    ) -> forking.Child:
        data = base64.b64encode(pickle.dumps(payload)).decode()
        # the asker's import path: its task function may live where only it looks (a test
        # module pytest imported by its folder); and the asker's stderr: the task writes where
        # the asker's fd 2 goes now (a runner's log, or the file that holds the start's output:
        # harness/case_warnings.py)
        fields = {"fn": fn, "payload": data, "warm": list(warm), "path": sys.path}
        return self.request("task", [progress_fd, 2], **fields)

    def fork_runner(self, job: dict, fds: list[int]) -> forking.Child:
        return self.request("runner", fds, job=job)

    def imported(self, modules: list[str]) -> None:
        """Tell the zygote that a child had to import `modules` (no reply; a gone zygote is
        not this child's concern)."""
        try:
            send_packet(self.sock, "imported", modules=modules)
        except OSError:
            pass

    def task_link(self) -> ZygoteLink:
        """A link to the task zygote this zygote keeps for CPU work (started on the first ask;
        a task zygote answers with a link to itself)."""
        try:
            send_packet(self.sock, "task-link")
            reply, fds = receive_packet(self.sock)
        except OSError as exc:
            raise ZygoteGone(f"the zygote is gone ({exc})") from None
        if reply is None or not fds:
            raise ZygoteGone("the zygote gave no task link")
        return ZygoteLink(socket.socket(fileno=fds[0]))

    def new_link(self) -> socket.socket:
        """A further link to the same zygote (for a spawned runner): the other end is returned."""
        ours, theirs = link_pair()
        try:
            send_packet(self.sock, "adopt", [ours.fileno()])
        finally:
            ours.close()
        return theirs

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _Reply:
    """The asking side's handler of a zygote's reply to a request for a child."""

    def __init__(self, status_fd: int) -> None:
        self.status_fd = status_fd

    def on_forked(self, pid: int) -> forking.Child:
        return forking.Child(pid, self.status_fd)

    def on_refused(self, reason: str) -> NoReturn:
        raise ZygoteGone(reason)


class ZygoteServer:
    """The zygote's loop (never returns): `runner(job, fds)` serves a runner request in the
    forked child (None: a task zygote, which refuses them)."""

    def __init__(
        self, links: list[socket.socket], runner: Callable[[dict, list[int]], NoReturn] | None
    ) -> None:
        self.links = list(links)
        self.runner = runner
        self.imports: list[str] = []  # what runners reported importing (imported before a fork)
        self.forked = 0  # children forked so far
        self.tasks: ZygoteLink | None = None  # a runner zygote's task zygote (_send_task_link)
        self.status_fds: dict[int, int] = {}  # child pid -> the asker's status pipe
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def serve(self) -> NoReturn:
        """Never returns, nor lets an exception unwind into the code that called it (a zygote
        forked from the pytest process has that process's stack below it)."""
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.set_wakeup_fd(self.wake_w)
            signal.signal(signal.SIGCHLD, lambda *_: None)
            while self.links:
                ready, _, _ = select.select([*self.links, self.wake_r], [], [], 1.0)
                for sock in ready:
                    if sock is self.wake_r:
                        os.read(self.wake_r, 4096)
                    else:
                        self._handle(sock)
                self._reap()
        except BaseException:  # noqa: BLE001 - Ctrl-C, a broken link: the zygote ends
            pass
        os._exit(0)

    def _handle(self, sock: socket.socket) -> None:
        request, fds = receive_packet(sock)
        if request is None:
            self.links.remove(sock)
            sock.close()
            return
        messages.dispatch(self, request, sock=sock, fds=fds)

    # ---- the requests (processes/messages.py dispatches each to its on_<kind>) ----------------
    def on_adopt(self, sock: socket.socket, fds: list[int]) -> None:
        self.links.append(socket.socket(fileno=fds[0]))

    def on_imported(self, modules: list[str], sock: socket.socket, fds: list[int]) -> None:
        self.imports += [m for m in modules if m not in self.imports]

    def on_task_link(self, sock: socket.socket, fds: list[int]) -> None:
        """Reply with a new link to the task zygote of this one's children (a runner zygote
        starts it on the first ask: its runners' CPU work never runs in a zygote that must keep
        the device visible), or to this zygote itself (a task zygote)."""
        if self.runner is None:
            ours, theirs = link_pair()
            self.links.append(ours)
        else:
            if self.tasks is None:
                self.tasks = start_task_zygote()
            theirs = self.tasks.new_link()
        try:
            send_packet(sock, "link", [theirs.fileno()])
        except OSError:
            pass
        theirs.close()

    def on_task(self, sock: socket.socket, fds: list[int], **task: Any) -> None:
        for ref in task["warm"]:
            forking.warm_up(ref)
        self._fork(sock, fds, "task", lambda passed: _run_task(task, passed))

    def on_runner(self, job: dict, sock: socket.socket, fds: list[int]) -> None:
        runner = self.runner
        if runner is None:
            self._refuse(sock, fds, "a task zygote forks no runner")
            return
        import_quietly(self.imports)
        self.imports = []  # tried once: a failed import is not tried again
        self._fork(sock, fds, "runner", lambda passed: runner(job, passed))

    def _fork(
        self, sock: socket.socket, fds: list[int], kind: str, child: Callable[[list[int]], Any]
    ) -> None:
        """Fork a child of `kind` that runs `child(passed fds)` (it never returns there), and
        reply `forked` (or `refused`, where this zygote may not fork)."""
        *passed, status_w = fds
        try:
            pid = launch.fork(kind, f"zygote:{kind}")
        except forking.ForkRefused as exc:
            self._refuse(sock, fds, f"the zygote may not fork: {exc}")
            return
        if pid == 0:
            self._in_child(passed, status_w, child)
        self.forked += 1
        self.status_fds[pid] = status_w
        _reply(sock, passed, "forked", pid=pid)

    @staticmethod
    def _refuse(sock: socket.socket, fds: list[int], reason: str) -> None:
        *passed, status_w = fds
        os.close(status_w)
        _reply(sock, passed, "refused", reason=reason)

    def _in_child(
        self, passed: list[int], status_w: int, child: Callable[[list[int]], Any]
    ) -> NoReturn:
        try:
            os.close(status_w)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (self.wake_r, self.wake_w, *self.status_fds.values()):
                os.close(fd)
            for sock in self.links:
                sock.close()
            if self.tasks is not None:
                self.tasks.close()
            child(passed)
        except BaseException:  # noqa: BLE001 - never run the zygote's loop in a child
            pass
        os._exit(3)

    def _reap(self) -> None:
        while self.status_fds:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            fd = self.status_fds.pop(pid, None)
            if fd is not None:
                try:
                    messages.say(fd, "ended", status=status)
                except OSError:
                    pass
                os.close(fd)


def _reply(sock: socket.socket, passed: list[int], kind: str, **fields: Any) -> None:
    """Answer a request for a child, and close the descriptors it passed (the child has its
    copies)."""
    try:
        send_packet(sock, kind, **fields)
    except OSError:
        pass
    for fd in passed:
        os.close(fd)


def _run_task(task: dict, passed: list[int]) -> NoReturn:
    """In a task child: the asker's stderr and import path, then the task (never returns)."""
    if len(passed) > 1:  # the asker's stderr
        os.dup2(passed[1], 2)
    sys.path[:0] = [p for p in task["path"] if p not in sys.path]
    payload = pickle.loads(base64.b64decode(task["payload"]))
    forking.run_task(task["fn"], payload, passed[0])
    os._exit(3)  # run_task never returns


def die_with_parent() -> None:
    """Be killed when the process that started this one dies (Linux PR_SET_PDEATHSIG): a run
    stopped by SIGTERM or a lost xdist worker must leave no zygote, and no runner computing for
    minutes (a torch_xla graph of 65,537 outputs compiled on for 20 minutes after its run
    ended). Not Linux: the process ends when its links or command pipe close."""
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(3)


def start_task_zygote() -> ZygoteLink:
    """A task zygote for this process (CPU work: sample captures, CPU survivors)."""
    ours, theirs = link_pair()
    proc = launch.spawn(
        "task-zygote",
        ["-m", "conformance.processes.zygote", str(theirs.fileno())],
        {**forking.QUIET, **HIDDEN_ACCELERATORS},
        stdin=subprocess.DEVNULL,
        pass_fds=(theirs.fileno(),),
    )
    theirs.close()
    return ZygoteLink(ours, proc)


class LazyImports:
    """In a runner: which of `modules` (the ones torch imports lazily, each costing about a
    second) this runner had to import, told once to its zygote after the case that imported
    them (`check`), so that the zygote imports them before it forks the next runner. A run whose
    runners never need one never imports it."""

    def __init__(self, link: ZygoteLink, modules: tuple[str, ...]) -> None:
        self.link = link
        self.pending = [m for m in modules if m not in sys.modules]

    def check(self) -> None:
        new = [m for m in self.pending if m in sys.modules]
        if new:
            self.pending = [m for m in self.pending if m not in new]
            self.link.imported(new)


def import_quietly(modules: list[str]) -> None:
    """Import `modules` in this zygote (a child forked later starts with them). None is
    imported into a zygote that may not fork; one whose import left a thread behind would make
    the next fork refused, and the owner would spawn its runners from then on (the run header
    says why): torch._dynamo and torch.fx.experimental.symbolic_shapes start none (torch 2.9,
    2.13)."""
    import importlib

    for name in modules:
        if forking.refusal() is not None:
            break
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a warm-up only: the child imports it as it would
            pass


def main(argv: list[str]) -> NoReturn:
    """`python -m conformance.processes.zygote FD`: a task zygote serving the link on FD."""
    die_with_parent()
    import importlib

    for name in TASK_MODULES:
        importlib.import_module(name)
    ZygoteServer([socket.socket(fileno=int(argv[0]))], None).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
