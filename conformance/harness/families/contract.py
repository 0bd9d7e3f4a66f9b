"""The runtime contract cases (`conformance/contract`): records and expectations in
harness/contract_records.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from conformance.harness.contract_records import (
    contract_record,
    expect_contract,
    new_contract_record,
)
from conformance.harness.families.base import Family
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class Contract(Family):
    name = "contract"
    folder = "contract"
    rank = 10

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_contract_record(suite, nodeid, status, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return contract_record(suite, item, report)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_contract(suite, item)


FAMILY = Contract()
