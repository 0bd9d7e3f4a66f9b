"""Accounting: every collected case and scenario ends with exactly one record.

The collected node ids (from the items, or, on an xdist controller that has none, from a
worker's collection: `nodes.py` judges them by the file they name), and at the end of the run a
`not-run` record, with the reason, for each that has no record (the run stopped early, Ctrl-C or
SIGTERM, pytest-xdist stopped scheduling). Also the workers that died before collecting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from conformance.harness.families import registry
from conformance.harness.nodes import record_id
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class Accounting:
    """Collected against recorded, for one process that starts a run."""

    def __init__(self) -> None:
        self.collected: list[str] = []  # node ids of the conformance items of the run
        self.interrupted_by: str | None = None  # SIGTERM, when it ended the run
        # xdist controller: workers that collected, and those that died before they did
        self.started_workers: set[str] = set()
        self.worker_start_failures: list[str] = []

    def items_collected(self, items: list[pytest.Item]) -> None:
        families = registry()
        self.collected = [i.nodeid for i in items if families.of_item(i) is not None]

    def worker_collected(self, config: pytest.Config, worker: str, ids: list[str]) -> None:
        """An xdist worker's collection (every worker collects the same items: the first
        counts)."""
        self.started_workers.add(worker)
        if not self.collected:
            ours = registry().nodeid_judge(config)
            self.collected = [i for i in ids if ours(i)]

    def worker_down(self, worker: str) -> bool:
        """An xdist worker died; True if it never collected (it would fail again)."""
        if worker in self.started_workers:
            return False
        self.worker_start_failures.append(worker)
        return True

    def missing(self, records: list[CaseRecord]) -> list[str]:
        """The collected node ids that have no record."""
        recorded = {r.id for r in records}
        return [n for n in self.collected if record_id(n) not in recorded]

    def not_run_reason(self, session: pytest.Session, exitstatus: int) -> str:
        stop = session.shouldstop or session.shouldfail
        if stop:
            return f"not run: the run stopped early ({stop})"
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return f"not run: the run was interrupted ({self.interrupted_by or 'Ctrl-C'})"
        return (
            "not run: no result came back for this case (pytest-xdist stopped scheduling, "
            "or the process running it was lost)"
        )

    def counts(self, records: list[CaseRecord]) -> dict[str, int]:
        """Collected vs recorded (run.json, terminal)."""
        recorded = {r.id for r in records}
        not_run = sum(1 for r in records if r.status is Status.NOT_RUN)
        return {"collected": len(self.collected), "recorded": len(recorded), "not_run": not_run}

    def start_failure_note(self) -> str | None:
        if not self.worker_start_failures:
            return None
        return (
            f"conformance: pytest-xdist worker(s) {', '.join(self.worker_start_failures)} "
            "stopped before collecting (the error is above); the run stops instead of "
            "replacing them"
        )


def not_run_record(suite: Suite, nodeid: str, reason: str) -> CaseRecord:
    """The `not-run` record of a case of any family (its family's record factory)."""
    family = registry().of_nodeid(nodeid)
    assert family is not None, nodeid  # collected: one of the suite's
    return family.new_record(suite, nodeid, Status.NOT_RUN, message=reason)
