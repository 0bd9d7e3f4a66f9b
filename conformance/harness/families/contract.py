"""The runtime contract cases (`conformance/contract`) as records: one per collected case, named
after its contract item (engine/runtime_contract.py), with the PyTorch doc the item comes from
and how its streams were held (`held_by`); also for a case that hung, crashed or never ran (the
item named in each). A case that passed without testing a fence on a busy stream says "not
observable: ..." (`not_observable`), counted in the summary (`unobserved_lines`). A manifest
names an item as `contract:<item>` (xfail, skip, crash; strict)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from conformance.engine import runtime_contract
from conformance.engine.modes.asynchronous import NOT_OBSERVABLE
from conformance.engine.runtime_contract import item_of_test
from conformance.harness.families.base import Family
from conformance.harness.families.expectations import (
    expect_family,
    expected_by,
    report_message,
    unexpected_pass,
)
from conformance.harness.nodes import left_verdict, record_id
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


def new_contract_record(suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
    """A record of the contract case `nodeid` (a hang, crash or not-run passes its message)."""
    name = record_id(nodeid)
    item = item_of_test(name)
    overload = item.name if item is not None else name
    known = item.name if item is not None else None
    record = FAMILY.case_record(
        suite, nodeid, status, known, op="contract", overload=overload, path="contract", **values
    )
    if item is not None:
        record.extra.update(contract_item=item.name, doc=item.doc)
    return record


def contract_key(nodeid: str) -> str:
    """What manifest patterns are matched against for a contract case (`contract:<item>`)."""
    name = record_id(nodeid)
    item = item_of_test(name)
    return FAMILY.manifest_key(item.name if item is not None else name)


def expect_contract(suite: Suite, item: pytest.Item) -> None:
    """A manifest entry naming the case's item marks it (xfail strict, skip, crash)."""
    expect_family(suite, item, contract_key(item.nodeid))


def contract_record(suite: Suite, item: pytest.Item, report: pytest.TestReport) -> CaseRecord:
    """The record of a contract case from its pytest report."""
    message = report_message(report)
    record = new_contract_record(suite, item.nodeid, Status.PASSED, message=message)
    key = contract_key(item.nodeid)
    entry = expected_by(suite, record, key)
    if unexpected_pass(record, entry, key, report, f"the contract item {record.overload}"):
        return record
    runtime = left_verdict(item)  # the contract's Runtime (conformance/contract/conftest.py)
    if runtime is not None and runtime.held_by:
        record.extra["held_by"] = runtime.held_by
    why = runtime.not_observed() if runtime is not None else None
    if report.passed and why:
        record.extra["not_observable"] = why
        record.message = f"[contract {record.overload}] not observable: {why}"
    if report.failed:
        record.check = FAMILY.check
        contract = record.extra.get("contract_item", "?")
        if message and "[contract " in message:  # ContractBroken: the observation alone
            record.message = message[message.index("[contract ") :]
        elif message:  # an error of the device or of torch, not an observation
            record.message = f"[contract {contract}] {message}"
    return record


def unobserved_lines(records: list[CaseRecord]) -> list[str]:
    """The summary's lines of how the contract's streams were held, and of what passed without
    being observed: contract items (each with its record's reason) and -asynchronous cases
    whose streams were idle at the fences."""
    held: dict[str, list[str]] = {}
    unobserved = []
    for r in records:
        if r.extra.get("held_by"):
            held.setdefault(str(r.extra["held_by"]), []).append(r.overload)
        if r.extra.get("not_observable") and r.status is Status.PASSED:
            unobserved.append(r.overload)
    lines = [
        f"conformance: contract: streams held busy by {how}: {len(names)} item(s)"
        for how, names in held.items()
    ]
    if unobserved:
        lines.append(
            f"conformance: contract: {len(unobserved)} item(s) passed without being observed "
            f"({', '.join(sorted(unobserved))}): each record says why (not_observable)"
        )
    modes = [
        r
        for r in records
        if r.status is Status.PASSED
        and any(str(n).startswith(NOT_OBSERVABLE) for n in r.extra.get("notes", ()))
    ]
    if modes:
        lines.append(
            f"conformance: -asynchronous: {len(modes)} case(s) passed without being observed "
            "(their streams were idle at the fences: see each record's note)"
        )
    return lines


class Contract(Family):
    name = "contract"
    folder = "contract"
    rank = 10
    manifest_prefix = "contract"  # `contract:<item>`
    manifest_field = "overload"  # the contract item
    check = "contract"

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_contract_record(suite, nodeid, status, **values)

    def header_lines(self, suite: Suite) -> list[str]:
        """What the contract cases rely on, what the profile leaves out, whether races show."""
        b = suite.backend
        return runtime_contract.header_lines(b.profile, b.hook("set_delay") is not None)

    def key_header_lines(self, suite: Suite) -> list[str]:
        return self.header_lines(suite)[1:]  # what the profile leaves out, whether races show

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return contract_record(suite, item, report)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_contract(suite, item)

    def end_notes(self, records: list[CaseRecord]) -> list[str]:
        return unobserved_lines(records)


FAMILY = Contract()
