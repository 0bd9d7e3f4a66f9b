"""The end-to-end scenarios (`conformance/scenarios`) as records: a scenario's verdict from its
pytest report, the manifest's expectations of it (`scenario:<name>` patterns: xfail, skip, crash,
unsupported; strict), and blame: a scenario that needs a kernel the device lacks is blocked by it
when it is a foundation whose probe failed, else fails as `unsupported` (undeclared)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from conformance.engine.foundations import Blame
from conformance.harness.families.base import Family
from conformance.harness.families.expectations import (
    expect_family,
    expected_by,
    report_message,
    unexpected_pass,
)
from conformance.harness.nodes import record_id
from conformance.harness.verdicts import undeclared
from conformance.record import CaseRecord, Status, missing_kernel

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


def expect_scenario(suite: Suite, item: pytest.Item) -> None:
    """A manifest entry naming a scenario: xfail (strict: a pass fails with "remove this
    entry"), skip and crash skip it; unsupported lets it skip when the device lacks a kernel it
    needs (scenarios/conftest.py)."""
    expect_family(suite, item, scenario_key(item.nodeid))


def scenario_key(nodeid: str) -> str:
    """What manifest patterns are matched against for the scenario `nodeid`
    (`scenario:<its name>`)."""
    return FAMILY.manifest_key(record_id(nodeid))


def new_scenario_record(
    suite: Suite, nodeid: str, test_file: str, status: Status, **values: Any
) -> CaseRecord:
    """A record of the scenario `nodeid` (its test file at `test_file`; a hang, crash or not-run
    passes its check and message)."""
    overload = nodeid.rpartition("::")[2]
    return FAMILY.case_record(
        suite, nodeid, status, None, test_file, op="scenario", overload=overload, dtype="-",
        layout="-", path="scenario", **values,
    )  # fmt: skip


def scenario_record(suite: Suite, item: pytest.Item, report: pytest.TestReport) -> CaseRecord:
    """The result record of an end-to-end scenario (conformance/scenarios)."""
    message = report_message(report)
    record = new_scenario_record(
        suite,
        item.nodeid,
        str(item.path),
        Status.PASSED,
        check=FAMILY.check if report.failed else None,
        message=message,
    )
    key = FAMILY.manifest_key(record.id)
    entry = expected_by(suite, record, key)
    if unexpected_pass(record, entry, key, report, f"the scenario {record.id}"):
        return record
    if report.skipped and (message or "").startswith("unsupported"):
        record.status = Status.UNSUPPORTED
    try:
        found = suite.foundations.scenario_blame(message or "") if report.failed else Blame()
    except Exception as exc:  # noqa: BLE001 - blame annotates; the record stays
        found = Blame()
        record.extra["blame"] = f"blame could not be computed: {type(exc).__name__}: {exc}"
    missing = missing_kernel(message) if report.failed else None
    if missing is not None and found.blocked_by is None:
        record.check = "unsupported"
        record.message = undeclared(
            f"[unsupported] the device has no kernel for {missing}, which this scenario "
            f"needs ({message})"
        )
    probe = found.blocked_by
    if found.related is not None:
        record.extra["related_foundation"] = found.related.case
        record.message = f"{message}\n  might be related: {found.related.describe()} is broken"
    if probe is not None:  # a scenario reads every result back through _copy_from
        record.status = Status.BLOCKED
        record.blocked_by = probe.case
        record.extra["blocked_by_message"] = f"{probe.what}: {probe.message}"
        record.extra["blocked_by_probe"] = probe.message
        record.message = f"[blocked] {probe.headline()}; own failure: {message}"
    return record


class Scenarios(Family):
    name = "scenarios"
    folder = "scenarios"
    rank = 30
    manifest_prefix = "scenario"  # `scenario:<test name>`
    check = "scenario"
    findings = MappingProxyType({"raised_on_the_device": True})  # its message: what raised

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_scenario_record(suite, nodeid, self.test_file(nodeid), status, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return scenario_record(suite, item, report)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_scenario(suite, item)


FAMILY = Scenarios()
