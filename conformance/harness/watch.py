"""Cases no runner process supervises (an xdist worker or a plain pytest process running
in-process, `--isolate none`): a per-case time limit, and, on the xdist controller, the record of
a case whose worker died or was ended by that limit.

The limit is faulthandler's watchdog (a C thread: it fires even when a kernel holds the GIL):
past it every stack is printed and the process ends. Each worker first notes the case it runs
in a folder the controller gave it; the controller reads the note when xdist reports the crash
and marks the case `hung` rather than `crashed`.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from conformance.record import CaseRecord, Status

WATCH_DIR_KEY = "conformance_watch_dir"  # xdist: where workers note the case they run
PROBE_KEY = "conformance_probe"  # xdist: the controller's device probe (workers never probe)


class CaseWatch:
    """The notes folder of one run (made by the xdist controller, given to its workers)."""

    def __init__(self, config: pytest.Config, worker: str) -> None:
        self.worker = worker
        self.folder: str | None = getattr(config, "workerinput", {}).get(WATCH_DIR_KEY)
        self._own = False

    def arm(self, nodeid: str, limit: float) -> None:
        """Note the case, then start the watchdog for `limit` seconds."""
        if self.folder:
            note = {"nodeid": nodeid, "started": time.time(), "limit": limit}
            with open(os.path.join(self.folder, f"{self.worker}.json"), "w") as f:
                json.dump(note, f)
        faulthandler.dump_traceback_later(limit, exit=True)

    @staticmethod
    def disarm() -> None:
        faulthandler.cancel_dump_traceback_later()

    def give_folder(self, node) -> None:
        """xdist controller: every worker gets the folder for its running-case note."""
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="conformance-watch-")
            self._own = True
        node.workerinput[WATCH_DIR_KEY] = self.folder

    def hung(self, crashitem: str, worker: str) -> float | None:
        """The time limit a worker's case ran past, if its note says it did."""
        try:
            with open(os.path.join(self.folder or "", f"{worker}.json")) as f:
                note = json.load(f)
        except (OSError, ValueError):
            return None
        if note.get("nodeid") != crashitem:
            return None
        return note["limit"] if time.time() - note["started"] >= note["limit"] else None

    def crash_record(
        self,
        crashitem: str,
        report: pytest.TestReport,
        new_record: Callable[..., CaseRecord | None],
    ) -> CaseRecord | None:
        """xdist: a worker died (or was ended by the time limit) running `crashitem`: the
        report's message, and the case's record, of whichever family (None for other tests;
        `new_record(nodeid, status, **values)`)."""
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "")
        limit = self.hung(crashitem, worker)
        if limit is not None:
            status, check = Status.HUNG, "hang"
            message = (
                f"[hang] the case ran past its time limit of {limit:g} s (--case-timeout); "
                f"worker {worker} was stopped"
            )
        else:
            status, check, message = Status.CRASHED, "crash", "[crash] " + str(report.longrepr)
        report.longrepr = message
        record = new_record(crashitem, status, check=check, message=message)
        if record is not None:
            record.duration = round(report.duration, 6)
        return record

    def remove(self) -> None:
        if self._own and self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


class ControllerRun(Protocol):
    """What the controller's hooks need of the run (the session's `ConformanceRun`)."""

    config: pytest.Config
    watch: CaseWatch
    recorder: Any
    accounting: Any
    plan: Any  # harness/plan.py Plan, once planned

    @property
    def started(self) -> bool: ...

    def log(self, record: CaseRecord) -> None: ...

    def record_for_nodeid(
        self, nodeid: str, status: Status, **values: Any
    ) -> CaseRecord | None: ...


class ControllerHooks:
    """The pytest-xdist controller's hooks of a run: notes folders for the workers, the record
    of a case whose worker died or hung, the collection it counts, and a worker that died
    before collecting (collaborator: the run's `ConformanceRun`)."""

    def __init__(self, run: ControllerRun) -> None:
        self.run = run

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist controller: give every worker the folder for its running-case note, and the
        device probe (a worker never touches the device, nor probes it again)."""
        self.run.watch.give_folder(node)
        if self.run.plan is not None:
            node.workerinput[PROBE_KEY] = self.run.plan.probe_json()

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        """xdist: a worker died (or was ended by the time limit) running `crashitem`; its line
        is written here, by the controller."""
        record = self.run.watch.crash_record(crashitem, report, self.run.record_for_nodeid)
        if record is not None and self.run.recorder is not None:
            self.run.log(record)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        """xdist controller: every worker collects the same items; the first list counts."""
        if self.run.started:
            self.run.accounting.worker_collected(self.run.config, node.gateway.id, ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error: object | None) -> None:
        """xdist controller: a worker that died before it collected (the backend failed to load
        there, a probe failed) would fail the same way every time xdist replaced it, so the
        run stops instead (with --max-worker-restart set high for crashes, xdist would replace
        it until memory ran out)."""
        if (
            error is None
            or not self.run.started
            or not self.run.accounting.worker_down(node.gateway.id)
        ):
            return
        dsession = self.run.config.pluginmanager.getplugin("dsession")
        if dsession is not None and hasattr(dsession, "_max_worker_restart"):
            dsession._max_worker_restart = getattr(dsession, "_failed_nodes_count", 0)
