"""The runner zygote: a process holding the collected items that never touches the device,
never runs a case, and forks the case runners on request (processes/zygote.py); their CPU tasks
(processes/forking.py) go to a task zygote it starts for them (accelerators hidden).

Each process that schedules cases (the plain pytest process, or each xdist worker) starts one
when its first runner is needed: forked from itself where it may fork (one thread, the device
untouched: a plain pytest process before its first case; it inherits the collection), else a
fresh `python -m pytest` with the run's arguments (an xdist worker: execnet's receiver is a
thread) that collects the same items, the op cases its owner names (runners.py
`write_case_file`), started with one thread (`forking.QUIET`). A zygote that has threads after
loading the backend refuses to fork, and the owner spawns its runners instead (the header says
why). It ends when its owner closes the link, and dies with its owner.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any, NoReturn

import pytest

from conformance.engine.backend import Backend
from conformance.engine.probe import initialised
from conformance.harness.runners import RUNNER_ENV, runner_args, spawned_job
from conformance.harness.serving import serve
from conformance.processes import forking, launch
from conformance.processes.this import THIS
from conformance.processes.zygote import (
    LazyImports,
    ZygoteLink,
    ZygoteServer,
    die_with_parent,
    link_pair,
)

#: what torch imports lazily in a runner, each about 1 s of that runner's time: torch._dynamo, on
#: the first call of one of torch's Python kernels (the Python meta kernels and decompositions a
#: backend reaches, `torch._disable_dynamo`), and symbolic_shapes with sympy, on the first
#: dynamic-shape or compiled case (the -grad cases call the autograd engine without
#: torch.autograd.grad's preamble, which imports it: engine/grad_steps.py). A runner that had to
#: import one tells its zygote, which imports it before it forks the next runner (one per
#: --runner-cases cases, one after each crash or hang): processes/zygote.py `LazyImports`
RUNNER_IMPORTS = ("torch._dynamo", "torch.fx.experimental.symbolic_shapes")


class RunnerZygote(ZygoteLink):
    """The owner's side: the zygote's process and log, and its link."""

    @classmethod
    def start(
        cls, session: pytest.Session, run: Any, backend: Backend, cases: Callable[[], str]
    ) -> RunnerZygote:
        """Forked from this process where it may fork, else spawned (`cases()`: the file naming
        the op cases to collect, runners.write_case_file)."""
        log = tempfile.NamedTemporaryFile(prefix="conformance-zygote-", suffix=".log", delete=False)
        ours, theirs = link_pair()
        try:
            if forking.refusal() is None and not initialised(backend):
                pid = launch.fork("runner-zygote", "zygote")
                if pid == 0:  # the zygote: never returns
                    ours.close()
                    os.dup2(log.fileno(), 1)
                    os.dup2(log.fileno(), 2)
                    die_with_parent()
                    _serve(theirs, session, run, backend)
                return cls(ours, forking.Child(pid), log.name)
            job = {"zygote": theirs.fileno(), "profile": backend.profile.to_json()}
            job["cases"] = cases()
            config = session.config
            popen = launch.spawn(
                "runner-zygote",
                ["-m", "pytest", *runner_args(config), "-q"],
                {**forking.QUIET, RUNNER_ENV: json.dumps(job)},
                cwd=str(config.invocation_params.dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
            )
            return cls(ours, popen, log.name)
        finally:
            log.close()
            theirs.close()

    def __init__(self, sock: socket.socket, process: Any, log_path: str) -> None:
        super().__init__(sock, process)
        self.log_path = log_path

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        """Close the link (the zygote then exits) and reap it."""
        super().close()
        if isinstance(self.owner, forking.Child):
            if self.owner.wait(5) is None:
                self.owner.kill()
                self.owner.wait()
        else:
            try:
                self.owner.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.owner.kill()
                self.owner.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def serve_zygote(session: pytest.Session, run: Any, backend: Backend) -> NoReturn:
    """In a spawned zygote (its role: harness/roles.py): fork runners until the owner closes
    the link; never returns. `run` is the process's ConformanceRun (its children are runners)."""
    job = spawned_job()
    die_with_parent()
    _serve(socket.socket(fileno=job["zygote"]), session, run, backend)


def _serve(link: socket.socket, session: pytest.Session, run: Any, backend: Backend) -> NoReturn:
    config, items = session.config, session.items

    def runner(request: dict, fds: list[int]) -> NoReturn:
        cmd_fd, out_fd, log_fd, link_fd = fds
        own = ZygoteLink(socket.socket(fileno=link_fd))
        THIS.tasks_from = own  # its CPU work: the task zygote its zygote keeps
        lazy = LazyImports(own, RUNNER_IMPORTS)
        serve(config, items, cmd_fd, out_fd, log_fd, True, request["replay"], backend, lazy.check)
        os._exit(3)

    ZygoteServer([link], runner).serve()
