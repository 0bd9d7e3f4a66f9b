"""The run's scratch folder, shared by every process of one run (xdist workers, runners).

The process that starts a run makes it and names it in `_CONFORMANCE_RUN_DIR`, which xdist
workers and spawned runners inherit (forked runners inherit the object). It holds what a process
leaves for another: a runner's provisional verdict (the case's own result, written before the
suite's diagnostics run, so a crash in them cannot change it) and the foundation probe results
(`foundation-<dtype>.json`, computed once per run in an isolated process, engine/probing.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from filelock import FileLock

from conformance.record import CaseRecord

RUN_DIR_ENV = "_CONFORMANCE_RUN_DIR"


class RunDir:
    """One run's scratch folder; removed by the process that made it."""

    def __init__(self, path: str, owned: bool) -> None:
        self.path = path
        self.owned = owned

    @classmethod
    def for_process(cls, config: pytest.Config) -> RunDir:
        """The folder of the run this process belongs to (made here if it starts the run)."""
        from conformance.harness.runners import RUNNER_ENV

        inherited = os.environ.get(RUN_DIR_ENV)
        joins = hasattr(config, "workerinput") or RUNNER_ENV in os.environ
        if inherited and joins and os.path.isdir(inherited):
            return cls(inherited, owned=False)
        path = tempfile.mkdtemp(prefix="conformance-run-")
        os.environ[RUN_DIR_ENV] = path
        return cls(path, owned=True)

    def _verdict_path(self, pid: int) -> str:
        return os.path.join(self.path, f"verdict-{pid}.json")

    def write_verdict(self, nodeid: str, record: CaseRecord, longrepr: str) -> None:
        """Note the case's own verdict before the suite's diagnostics run (this process)."""
        tmp = self._verdict_path(os.getpid()) + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"nodeid": nodeid, "record": record.to_json(), "longrepr": longrepr}, f)
        os.replace(tmp, self._verdict_path(os.getpid()))

    def read_verdict(self, pid: int, nodeid: str) -> tuple[CaseRecord, str] | None:
        """The verdict runner `pid` noted for `nodeid`, if it got that far."""
        try:
            with open(self._verdict_path(pid)) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        if data.get("nodeid") != nodeid:
            return None
        return CaseRecord.from_json(data["record"]), str(data.get("longrepr", ""))

    def shared(self, name: str, compute: Callable[[], Any]) -> Any:
        """The JSON value `name` of this run: computed by the first process that asks (the
        others wait for it), then read by every process."""
        path = os.path.join(self.path, name)
        with FileLock(path + ".lock"):
            try:
                with open(path) as f:
                    return json.load(f)
            except (OSError, ValueError):
                pass
            value = compute()
            with open(path + ".tmp", "w") as f:
                json.dump(value, f)
            os.replace(path + ".tmp", path)
            return value

    def remove(self) -> None:
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)
