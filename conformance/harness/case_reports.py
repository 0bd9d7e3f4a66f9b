"""A case's record on its pytest reports, and the status it is logged with.

The record of a conformance case rides on the report that ends the case (its call, or a setup
that did not pass) as a user property, so it travels to an xdist controller or from a forked
child to its parent; where the case is logged it is read back and given its status: the one its
record decided (crashed, xpassed, ...) or pytest's outcome. No state.
"""

from __future__ import annotations

import pytest

from conformance.harness.nodes import RECORD_PROPERTY
from conformance.record import CaseRecord, Status

__all__ = ("attach_record", "ends_case", "logged_record", "outcome_status")

# statuses a case's record decides itself; any other comes from pytest's outcome
_DECIDED = frozenset(
    {
        Status.XPASSED,
        Status.CRASHED,
        Status.HUNG,
        Status.UNSUPPORTED,
        Status.ERROR,
        Status.BLOCKED,
        Status.TORCH_BUG,
    }
)


def ends_case(report: pytest.TestReport) -> bool:
    """The report that carries a case's record: its call, or a setup that did not pass."""
    return report.when == "call" or (report.when == "setup" and not report.passed)


def attach_record(report: pytest.TestReport, record: CaseRecord) -> None:
    """Put the case's record on its report (a user property: it travels with the report)."""
    report.user_properties.append((RECORD_PROPERTY, record.to_json()))


def logged_record(report: pytest.TestReport) -> CaseRecord | None:
    """The record a report carries, with the status, check and duration it is logged with
    (None: the report carries none)."""
    data = dict(report.user_properties).get(RECORD_PROPERTY)
    if data is None:
        return None
    record = CaseRecord.from_json(data)
    record.status = outcome_status(report, record)
    if record.status is Status.ERROR:
        record.check = record.check or "harness"
    record.duration = round(report.duration, 6)
    return record


def outcome_status(report: pytest.TestReport, record: CaseRecord) -> Status:
    """The case's status: decided by its record (crashed, xpassed, ...) or by pytest's outcome."""
    if record.status in _DECIDED:
        return record.status
    if report.when == "setup" and report.failed:
        return Status.ERROR
    if hasattr(report, "wasxfail"):
        return Status.XFAILED if report.skipped else Status.XPASSED
    return Status(report.outcome)
