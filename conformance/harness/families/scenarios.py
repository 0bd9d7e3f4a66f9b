"""The end-to-end scenarios (`conformance/scenarios`): records and expectations in
harness/scenario_records.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from conformance.harness.families.base import Family
from conformance.harness.scenario_records import (
    expect_scenario,
    new_scenario_record,
    scenario_record,
)
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class Scenarios(Family):
    name = "scenarios"
    folder = "scenarios"
    rank = 30  # last: a scenario's failure is named by the op cases that ran before it

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_scenario_record(suite, nodeid, self.test_file(nodeid), status, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return scenario_record(suite, item, report)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_scenario(suite, item)


FAMILY = Scenarios()
