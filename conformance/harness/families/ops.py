"""The op cases: `test_matches_cpu[<case id>]`, generated from the case list (harness/cases.py),
judged by the engine (harness/verdicts.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from conformance.harness.families.base import Family
from conformance.harness.nodes import case_of, record_id
from conformance.harness.verdicts import reported_record
from conformance.record import TEST_NAME, CaseId, CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class OpCases(Family):
    name = "ops"
    rank = 0

    def owns_item(self, item: pytest.Item) -> bool:
        return case_of(item) is not None

    def owns_nodeid(self, nodeid: str) -> bool:
        return record_id(nodeid).startswith(TEST_NAME + "[") and "::" in nodeid

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return suite.verdicts.new_record(CaseId.parse(nodeid), status, nodeid, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return reported_record(suite.verdicts, item, report)


FAMILY = OpCases()
