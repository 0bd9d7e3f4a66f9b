"""The autocast cases (`conformance/autocast`, docs/AUTOCAST.md) as records: one per aten op with
an autocast kernel on a reference device (AutocastCUDA, AutocastCPU, AutocastXPU), its policy
observed on CUDA, CPU and the device (engine/autocast/), failing where the device's class is not
CUDA's (one finding per class the device lacks: the first line of the message is the class's),
or where its region's values differ from CPU's; and the contract cases of `torch.autocast` on the
device (get_amp_supported_dtype, is_autocast_enabled). Each policy record carries its row of the
policy table (`table`: op, CUDA's, CPU's, the device's), which the reports draw. A manifest names
a case as `autocast:<op>` (xfail, skip, crash, unsupported: a difference the device declares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import torch

from conformance.engine.autocast.registrations import device_key, kernels, reference_kernels
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

POLICY_TEST = "test_autocast_policy"


@dataclass(frozen=True)
class AutocastPlan:
    """What the family judges: the device's autocast key and kernels, its lower precision,
    the reference devices' registrations, the ops (union of theirs); `missing`: why nothing."""

    device_type: str
    key: str | None
    device_kernels: dict[str, list[str]]
    references: dict[str, dict[str, list[str]]]
    lower: torch.dtype | None
    ops: tuple[str, ...] = ()
    missing: str | None = None


def autocast_plan(suite: Suite) -> AutocastPlan:
    """The plan from the device profile's dispatch key and the dispatcher (no device touched)."""
    backend = suite.backend
    dev = backend.device_type
    key = device_key(backend.profile.dispatch_key.value or "PrivateUse1")
    references = reference_kernels()
    ops = tuple(sorted({op for found in references.values() for op in found}))
    lower, missing = None, None
    try:
        lower = torch.get_autocast_dtype(dev)
    except (RuntimeError, AttributeError, TypeError) as exc:
        missing = f"torch has no autocast dtype for '{dev}' ({exc})"
    if key is None:
        missing = f"torch has no autocast dispatch key for the device '{dev}'"
    own = kernels(key) if key else {}
    return AutocastPlan(dev, key, own, references, lower, ops, missing)


def case_op(nodeid: str) -> str:
    """The op of a policy case's node id (`test_autocast_policy[mm]`), else the test's name."""
    name = record_id(nodeid)
    return name[name.index("[") + 1 : -1] if "[" in name else name


def new_autocast_record(suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
    """A record of the autocast case `nodeid` (a hang, crash or not-run passes its message)."""
    plan = FAMILY.plan(suite)
    policy_case = record_id(nodeid).startswith(POLICY_TEST)
    name = case_op(nodeid)
    return FAMILY.case_record(
        suite,
        nodeid,
        status,
        name,
        op=name,  # the aten op, or the contract test
        overload="policy" if policy_case else "contract",
        dtype=str(plan.lower).removeprefix("torch.") if plan.lower else "-",
        layout="-",
        path="autocast",
        **values,
    )


def autocast_record(suite: Suite, item: pytest.Item, report: pytest.TestReport) -> CaseRecord:
    """The record of an autocast case from its verdict (left on the item) and pytest report."""
    message = report_message(report)
    record = new_autocast_record(suite, item.nodeid, Status.PASSED, message=message)
    name = record.extra["autocast_case"]
    key = FAMILY.manifest_key(name)
    entry = expected_by(suite, record, key)
    if unexpected_pass(record, entry, key, report, f"the autocast case {name}"):
        return record
    verdict = left_verdict(item)
    if verdict is not None and verdict.policies:
        dev = FAMILY.plan(suite).device_type
        record.extra["table"] = {
            "op": name,
            "cuda": verdict.policies.get("cuda", "?"),
            "cpu": verdict.policies.get("cpu", "?"),
            "device": verdict.policies.get(dev, "?"),
        }
        if verdict.values:
            record.extra["values"] = verdict.values
    if report.skipped and (message or "").startswith("unsupported"):
        record.status = Status.UNSUPPORTED
    if report.failed:
        record.check = FAMILY.check
        if (record.message or "").startswith("Failed: [autocast"):  # pytest.fail's own prefix
            record.message = record.message.removeprefix("Failed: ")
    return record


def header_lines(plan: AutocastPlan) -> list[str]:
    """The family's run header lines: the keys, kernel counts and the device's lower dtype."""
    refs = ", ".join(f"{name} {len(ops)}" for name, ops in plan.references.items())
    if plan.missing is not None:
        return [f"autocast: none: {plan.missing}: {len(plan.ops)} cases not applicable"]
    lower = str(plan.lower).removeprefix("torch.")
    return [
        f"autocast: the device's policy ({plan.key}: {len(plan.device_kernels)} ops with a "
        f"kernel) in torch.autocast(device_type='{plan.device_type}', dtype={lower}), observed "
        f"by running each op's OpInfo sample, against CUDA's (fake CUDA tensors: no GPU needed) "
        f"and CPU's; ops with an autocast kernel: {refs}; {len(plan.ops)} cases "
        "(docs/AUTOCAST.md)"
    ]


def end_notes(records: list[CaseRecord]) -> list[str]:
    """The policy table's counts, and the ops no sample could classify."""
    tabled = [r for r in records if isinstance(r.extra.get("table"), dict)]
    rows = [r.extra["table"] for r in tabled if r.status is not Status.SKIPPED]
    observed = len(tabled) - len(rows)
    unsampled = sorted(
        r.extra.get("autocast_case", "")
        for r in records
        if r.status is Status.SKIPPED and "no OpInfo sample" in (r.message or "")
    )
    lines = []
    if rows:
        same = sum(1 for row in rows if row["device"] == row["cuda"])
        lines.append(
            f"conformance: autocast: the device's policy is CUDA's for {same} of the {len(rows)} "
            f"ops CUDA registers that a sample could classify; {observed} ops only CPU or XPU "
            "register observed, not judged (the policy table: each record's `table`, the "
            "report's autocast section)"
        )
    if unsampled:
        lines.append(
            f"conformance: autocast: {len(unsampled)} op(s) not judged (no OpInfo sample): "
            f"{', '.join(unsampled)}"
        )
    return lines


class Autocast(Family):
    name = "autocast"
    folder = "autocast"
    rank = 27
    manifest_prefix = "autocast"  # `autocast:<op>` or `autocast:<contract test>`
    manifest_field = "autocast_case"
    check = "autocast"

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_autocast_record(suite, nodeid, status, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return autocast_record(suite, item, report)

    def make_plan(self, suite: Suite) -> AutocastPlan:
        return autocast_plan(suite)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_family(suite, item, self.manifest_key(case_op(item.nodeid)))

    def header_lines(self, suite: Suite) -> list[str]:
        return header_lines(self.plan(suite))

    def end_notes(self, records: list[CaseRecord]) -> list[str]:
        return end_notes(records)


FAMILY = Autocast()
