"""The collectives cases (`conformance/collectives`, docs/COLLECTIVES.md): records and
expectations in harness/collective_records.py, their plan in harness/collectives_plan.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from conformance.harness.collective_records import (
    collective_record,
    expect_collective,
    new_collective_record,
)
from conformance.harness.families.base import Family
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class Collectives(Family):
    name = "collectives"
    folder = "collectives"
    rank = 20

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_collective_record(suite, nodeid, status, suite.collectives, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return collective_record(suite, suite.collectives, item, report)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_collective(suite, suite.collectives, item)


FAMILY = Collectives()
