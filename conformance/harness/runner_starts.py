"""Starting the runners of one scheduling process (the plain pytest process, or an xdist
worker): `RunnerStarts` holds what they share, the zygote that forks them all, the file naming
the cases a spawned one collects and the run's turns on a device one process may open at a
time; isolation.py's runners (and lanes.py's, several of them) start theirs here."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

import pytest

from conformance.engine.backend import Backend
from conformance.engine.probe import initialised
from conformance.harness.device_turns import DeviceTurns
from conformance.harness.options import Options
from conformance.harness.plan import Plan
from conformance.harness.rundir import RunDir
from conformance.harness.runners import RunnerProcess, write_case_file
from conformance.harness.zygotes import RunnerZygote
from conformance.processes.zygote import ZygoteGone
from conformance.record import CaseRecord, Status


class Owner(Protocol):
    """What the runners' owner needs of the run (the session's `ConformanceRun`)."""

    plan: Plan
    options: Options
    backend: Backend
    run_dir: RunDir

    def switch_to_spawn(self, reason: str) -> None: ...

    def record_for(self, item: pytest.Item, status: Status, **values: Any) -> CaseRecord | None: ...


class RunnerStarts:
    """Starts the runners of one scheduling process (the plain pytest process, or an xdist
    worker): the zygote that forks them all, the file naming the cases a spawned one collects,
    and the run's turns on a device one process may open at a time."""

    def __init__(self, session: pytest.Session, run: Owner) -> None:
        self.session = session
        self.run = run
        self.zygote: RunnerZygote | None = None  # forks the runners (harness/zygotes.py)
        self.case_file: str | None = None  # the op cases a spawned process collects
        self.turns: DeviceTurns | None = None  # a device one process may open at a time
        self.pipe_bytes = 0  # the runners' pipes enlarged to (runners.py: asked far ahead)

    def start(self, *, replay: bool = False, env: dict[str, str] | None = None) -> RunnerProcess:
        """A runner in the plan's mode (forked by the zygote, or spawned); `env` (extra
        variables) makes it a spawned one. On a device one process may open at a time, the
        run's device lock is taken first (held until the runner ends)."""
        run = self.run
        if run.plan.mode == "fork" and initialised(run.backend):
            run.switch_to_spawn(
                f"torch.{run.backend.device_type}.is_initialized() became True in the "
                "pytest process: forked children could not use the device"
            )
        mode = "spawn" if env else run.plan.mode
        if mode == "fork" and self.zygote is None:
            self.zygote = RunnerZygote.start(self.session, run, run.backend, self.case_list_file)
        lock = self._device_lock()
        try:
            return RunnerProcess(
                self.session.config,
                self.session.items,
                mode,
                replay=replay,
                env=env,
                backend=run.backend,
                zygote=self.zygote,
                device_lock=lock,
                cases=self.case_list_file() if mode == "spawn" else None,
                pipe_bytes=self.pipe_bytes,
            )
        except ZygoteGone as exc:
            if lock is not None:
                lock.release()
            tail = self.zygote.log_tail() if self.zygote is not None else ""
            self.close_zygote()
            run.switch_to_spawn(f"{exc}{' (zygote log: ' + tail + ')' if tail else ''}")
            return self.start(replay=replay, env=env)

    def _device_lock(self) -> DeviceTurns | None:
        """The run's turn on the device, taken (blocks while another owner's runner has it),
        where the device is one process's at a time (harness/device_turns.py)."""
        if not self.run.plan.exclusive:
            return None
        if self.turns is None:
            self.turns = DeviceTurns(self.run.run_dir.path)
        return self.turns.take()

    def case_list_file(self) -> str:
        """The file naming the op cases this process collected (written once): a spawned runner
        or zygote collects exactly those."""
        if self.case_file is None:
            self.case_file = write_case_file(self.session.items)
        return self.case_file

    def close_zygote(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None

    def finish(self) -> None:
        """The end of the run: the zygote closed, the case list file removed."""
        try:
            self.close_zygote()
        finally:
            if self.case_file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.case_file)
                self.case_file = None
