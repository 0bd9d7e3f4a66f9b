"""Worlds: N rank processes (ranks.py) per world size, started once and reused across cases.

Each rank is a spawned fresh interpreter (never a fork: some backends refuse one), given one end
of a socket pair; the process that runs the cases (a suite runner) keeps the other. A case goes to
every rank; each answers with its outputs or the error its backend raised. A rank that does not
answer within the timeout makes the case `hung` (the world is killed and the next case starts a
new one); a rank that dies makes it `crashed` (its exit status and the log's last words). A world
that cannot start (the backend's init_process_group raised) fails every case of its size with
that error, without starting again.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from conformance.engine.collectives.ranks import receive, send
from conformance.engine.collectives.spec import CollectiveCase
from conformance.engine.diagnosis import diagnose
from conformance.processes import launch

START_TIMEOUT_S = 180.0  # importing torch and the backend, joining the group (loaded machines)
P2P = ("send_recv", "batch_isend_irecv")  # messages outlive a raise: the world is replaced
MAX_WORLDS = 2  # worlds kept alive at once (the least recently used one is stopped)


@dataclass(frozen=True)
class Setup:
    """What every world of a run is: the c10d backend, the device type, how a rank loads the
    backend (`Backend.spec`, "" on cpu), the timeout of one case."""

    c10d: str
    device: str
    backend: str = ""
    timeout: float = 60.0


@dataclass
class Answer:
    """What one rank answered: `result` (outputs, info) or `raised` (info)."""

    kind: str
    outputs: list = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


class WorldFailure(Exception):
    """The world could not run the case: `status` is hung, crashed or failed (start)."""

    def __init__(self, status: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


class World:
    """The rank processes of one world size."""

    def __init__(self, size: int, setup: Setup) -> None:
        self.size, self.setup = size, setup
        self.folder = tempfile.mkdtemp(prefix=f"conformance-world{size}-")
        self.log_path = os.path.join(self.folder, "ranks.log")
        self.procs: list[subprocess.Popen] = []
        self.conns: list[Connection] = []
        try:
            self._start()
        except BaseException:
            self.discard()  # a rank that hung or died: its failure carries the log's tail
            raise

    def _start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the ranks write it until they end
        store = os.path.join(self.folder, "store")
        try:
            for rank in range(self.size):
                ours, theirs = socket.socketpair()
                argv = [
                    "-m",
                    "conformance.engine.collectives.ranks",
                    f"--fd={theirs.fileno()}",
                    f"--rank={rank}",
                    f"--world={self.size}",
                    f"--timeout={max(self.setup.timeout * 2, 30.0)}",
                    f"--store={store}",
                    f"--c10d={self.setup.c10d}",
                    f"--device={self.setup.device}",
                    f"--backend={self.setup.backend}",
                ]
                proc = launch.spawn(
                    "collectives-rank",
                    argv,
                    {"OMP_NUM_THREADS": "1"},
                    pass_fds=(theirs.fileno(),),
                    stdout=log,
                    stderr=log,
                )
                theirs.close()
                self.procs.append(proc)
                self.conns.append(Connection(os.dup(ours.detach())))
        finally:
            log.close()
        what = f"init_process_group(backend={self.setup.c10d!r}) on {self.size} ranks"
        try:
            self._gather(START_TIMEOUT_S, what)
        except WorldFailure as exc:  # never retried: every case of this size fails with it
            raise WorldFailure("failed", exc.message, exc.detail) from None

    def run(self, case: CollectiveCase, reference: bool = False) -> list[Answer]:
        """Every rank's answer to `case` (on the gloo reference group if `reference`)."""
        for conn in self.conns:
            try:
                send(conn, ("reference" if reference else "case", asdict(case)))
            except OSError:
                pass  # the rank is gone: _gather says how
        op = f" {case.op}" if case.spec.reduces else ""
        return self._gather(self.setup.timeout, case.collective + op)

    def _gather(self, timeout: float, what: str) -> list[Answer]:
        answers: dict[int, Answer] = {}
        deadline = time.monotonic() + timeout
        pending = dict(enumerate(self.conns))
        while pending:
            left = deadline - time.monotonic()
            ready = wait(list(pending.values()), timeout=max(0.0, left)) if left > 0 else []
            if not ready:
                self._hung(sorted(pending), timeout, what)
            for rank, conn in list(pending.items()):
                if conn not in ready:
                    continue
                try:
                    message = receive(conn)
                except (EOFError, OSError):
                    self._died(rank, what)
                del pending[rank]
                answers[rank] = _answer(message)
                if answers[rank].kind == "failed":  # joining the group raised: the others wait
                    self.close()
                    error = answers[rank].info["error"]
                    raise WorldFailure("failed", f"[collectives] {what} raised {error}")
        return [answers[r] for r in range(self.size)]

    def _hung(self, ranks: list[int], timeout: float, what: str) -> None:
        self.close()
        which = ", ".join(str(r) for r in ranks)
        raise WorldFailure(
            "hung",
            f"[hang] {what}: rank(s) {which} of {self.size} did not answer within {timeout:g} s "
            "(--collective-timeout); the world was stopped",
            self.log_tail(),
        )

    def _died(self, rank: int, what: str) -> None:
        proc = self.procs[rank]
        try:
            status = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        self.close()
        how = _how(status)
        headline, detail = diagnose(self.log_tail())
        raise WorldFailure(
            "crashed",
            f"[crash] {what}: rank {rank} of {self.size} {how}"
            + (f": {headline}" if headline else ""),
            detail,
        )

    def log_tail(self, limit: int = 6000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-limit:]
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def close(self) -> None:
        """Stop every rank (a polite stop, then SIGKILL)."""
        for conn in self.conns:
            try:
                send(conn, ("stop",))
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []

    def discard(self) -> None:
        """Stop every rank and remove the world's folder (its ranks' log and store): a world
        is discarded when it is replaced or its process's worlds are closed."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _how(returncode: int | None) -> str:
    """How a rank ended, from its Popen return code."""
    if returncode is None:
        return "closed its connection"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _answer(message: tuple) -> Answer:
    kind = message[0]
    if kind == "result":
        return Answer("result", message[1], message[2])
    if kind == "failed":
        return Answer("failed", info={"error": message[1]})
    return Answer(kind, info=message[1] if len(message) > 1 else {})


class Worlds:
    """The worlds of one process, by size: started on first use, reused, replaced after a
    hang or a crash; a world that failed to start fails again at once."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.worlds: dict[int, World] = {}
        self.start_failures: dict[int, WorldFailure] = {}

    def get(self, size: int) -> World:
        if size in self.start_failures:
            raise self.start_failures[size]
        world = self.worlds.pop(size, None)
        if world is None or not world.alive:
            if world is not None:
                world.discard()
            while len(self.worlds) >= MAX_WORLDS:
                oldest = next(iter(self.worlds))
                self.worlds.pop(oldest).discard()
            try:
                world = World(size, self.setup)
            except WorldFailure as exc:
                if exc.status == "failed":
                    self.start_failures[size] = exc
                raise
        self.worlds[size] = world  # most recently used last
        return world

    def run(self, case: CollectiveCase, reference: bool = False) -> list[Answer]:
        """Every rank's answers; a world whose ranks may still hold work of this case (a
        point-to-point message posted before a rank raised, ranks that disagreed) is replaced
        before the next case, which would otherwise receive it or wait on it."""
        world = self.get(case.world)
        try:
            answers = world.run(case, reference)
        except WorldFailure:
            failed = self.worlds.pop(case.world, None)
            if failed is not None:  # stopped already; its failure holds the log's tail
                failed.discard()
            raise
        raised = sum(a.kind == "raised" for a in answers)
        if raised and (case.collective in P2P or raised < len(answers)):
            self.worlds.pop(case.world).discard()
        return answers

    def close(self) -> None:
        for world in self.worlds.values():
            world.discard()
        self.worlds = {}
