"""What the manifest expects of a case of a family (a scenario, a runtime contract case): the
entry named by its key (`scenario:<name>`, `contract:<item>`, harness/expectations.py) marks the
pytest item before it runs (xfail is strict, skip and crash skip it), and a pass of an expected
failure becomes the record's "remove this entry" failure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from conformance.harness.expectations import Entry
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


def report_message(report: pytest.TestReport) -> str | None:
    """What a family case's pytest report says went wrong (None for a pass): the crash line of
    a failure, the reason of a skip."""
    if report.passed:
        return None
    if isinstance(report.longrepr, tuple):  # skipped: (file, line, reason)
        return str(report.longrepr[2])
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(report.longrepr)


def expect_family(suite: Suite, item: pytest.Item, key: str) -> None:
    """Mark `item` with what the manifest entry matching `key` expects, if any (unsupported
    only changes how the case's skip is recorded)."""
    entry = suite.expectations.family_expectation(key)
    if entry is None:
        return
    if entry.status == "xfail":
        item.add_marker(pytest.mark.xfail(strict=True, reason=entry.describe()))
    elif entry.status in ("skip", "crash"):
        item.add_marker(pytest.mark.skip(reason=f"{entry.status}: {entry.describe()}"))


def expected_by(suite: Suite, record: CaseRecord, key: str) -> Entry | None:
    """The entry expecting the case `key`, noted in its record."""
    entry = suite.expectations.family_expectation(key)
    if entry is not None:
        entry.mark(record)
    return entry


def unexpected_pass(
    record: CaseRecord, entry: Entry | None, key: str, report: pytest.TestReport, noun: str
) -> bool:
    """Turn a pass the manifest does not expect (a strict xfail that passed, or an unsupported
    entry whose case passes) into the record's failure naming the entry to remove."""
    strict_pass = report.failed and (record.message or "").startswith("[XPASS(strict)]")
    if not (strict_pass or (entry is not None and entry.status == "unsupported" and report.passed)):
        return False
    assert entry is not None
    record.status, record.check = Status.XPASSED, None
    record.message = (
        f"unexpected pass: {noun} passes now; remove the entry {entry.matching(key)!r} from "
        f"{entry.source}"
    )
    report.outcome, report.longrepr = "failed", record.message  # type: ignore[assignment]
    return True
