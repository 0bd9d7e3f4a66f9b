"""The collectives cases (`conformance/collectives`, docs/COLLECTIVES.md) as records: one per
collected case, also for a case that hung, crashed or never ran; the manifest's expectations of
them (`collectives:<c10d>:<case id>`); the summary line of what the c10d backend refused."""

from __future__ import annotations

from collections import defaultdict
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from conformance.engine.collectives.judge import key_masks
from conformance.engine.collectives.spec import CollectiveCase
from conformance.harness.families.base import Family
from conformance.harness.families.collectives_plan import (
    CollectivesOptions,
    CollectivesPlan,
    collectives_plan,
)
from conformance.harness.families.collectives_plan import header_lines as collectives_header
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

_STATUS = MappingProxyType({"hung": (Status.HUNG, "hang"), "crashed": (Status.CRASHED, "crash")})


def manifest_key(plan: CollectivesPlan, case_id: str) -> str:
    """What manifest patterns are matched against: `collectives:<c10d>:<case id>`."""
    return FAMILY.manifest_key(collective_name(plan, case_id))


def collective_name(plan: CollectivesPlan, case_id: str) -> str:
    """A case's name in its manifest key and record (`collective_key`): `<c10d>:<case id>`."""
    return f"{plan.c10d}:{case_id}"


def expect_collective(suite: Suite, plan: CollectivesPlan, item: pytest.Item) -> None:
    """A manifest entry naming the case: xfail (strict), skip and crash skip it."""
    expect_family(suite, item, manifest_key(plan, _case_id(item.nodeid)))


def declared_unsupported(suite: Suite, nodeid: str) -> bool:
    """Whether the manifest declares the collectives case `nodeid` unsupported (an error that
    says the backend does not implement it is then the case's expected outcome)."""
    plan = FAMILY.plan(suite)
    if plan.c10d is None:
        return False
    entry = suite.expectations.family_expectation(manifest_key(plan, _case_id(nodeid)))
    return entry is not None and entry.status == "unsupported"


def _case_id(nodeid: str) -> str:
    name = record_id(nodeid)
    return name[name.index("[") + 1 : -1] if "[" in name else name


def new_collective_record(
    suite: Suite, nodeid: str, status: Status, plan: CollectivesPlan | None = None, **values: Any
) -> CaseRecord:
    """A record of the collectives case `nodeid` (a hang, crash or not-run passes its
    message)."""
    case_id = _case_id(nodeid)
    try:
        case = CollectiveCase.parse(case_id)
    except ValueError:
        case = None
    record = FAMILY.case_record(
        suite,
        nodeid,
        status,
        None,  # its manifest name needs the plan: `collective_key` below
        op=case.collective if case else "collectives",
        overload=case.op if case and case.op != "none" else "default",
        dtype=case.dtype if case else "-",
        layout=case.layout if case else "-",
        path="collectives",
        **values,
    )
    if case is not None:
        record.extra.update(
            collective=case.collective, reduce_op=case.op, size=case.size, world=case.world,
            mode=case.mode,
        )  # fmt: skip
        record.extra["key_masks"] = key_masks(case)
    if plan is not None and plan.c10d is not None:
        record.extra.update(c10d=plan.c10d, c10d_device=plan.device)
        record.repro += f" --collectives-set {plan.selection}"
        backend = f" --backend {plan.backend}" if plan.backend else ""
        record.extra["script"] = (
            f"python -m conformance.engine.collectives {case_id} --c10d {plan.c10d} "
            f"--device {plan.device}{backend}"
        )
        record.extra["collective_key"] = collective_name(plan, case_id)
        expected_by(suite, record, manifest_key(plan, case_id))
    return record


def collective_record(
    suite: Suite, plan: CollectivesPlan, item: pytest.Item, report: pytest.TestReport
) -> CaseRecord:
    """The record of a collectives case from its verdict (left on the item by the test) and
    its pytest report."""
    verdict = left_verdict(item)
    message = verdict.message if verdict is not None else None
    if message is None:
        message = report_message(report)
    record = new_collective_record(suite, item.nodeid, Status.PASSED, plan, message=message)
    if verdict is not None and verdict.status in _STATUS:
        record.status, record.check = _STATUS[verdict.status]
    elif verdict is not None and verdict.status == "unimplemented" and not report.failed:
        record.status = Status.UNSUPPORTED  # declared unsupported (`declared_unsupported`)
    elif report.failed:
        record.check = FAMILY.check
    if verdict is not None and verdict.ranks:
        record.extra["ranks"] = {str(r): e[:32] for r, e in verdict.ranks.items()}
    if plan.c10d is not None:
        key = manifest_key(plan, _case_id(item.nodeid))
        entry = suite.expectations.family_expectation(key)
        unexpected_pass(record, entry, key, report, f"the collectives case {record.id}")
    return record


def refusals(records: list[CaseRecord]) -> list[str]:
    """One summary line of what the c10d backend refused (skipped cases): per reduce op and
    dtypes, the collectives (`every collective with it` where none of them took it)."""
    refused: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    took: dict[str, set[str]] = defaultdict(set)  # reduce op -> the collectives run with it
    for r in records:
        c10d, reduce_op = r.extra.get("c10d"), str(r.extra.get("reduce_op"))
        took[reduce_op].add(r.op)
        if r.status is Status.SKIPPED and c10d and "refuses" in (r.message or ""):
            refused[(str(c10d), r.op, reduce_op)].add(r.dtype)
    if not refused:
        return []
    by_dtypes: dict[tuple[str, tuple[str, ...]], set[str]] = defaultdict(set)
    for (_, collective, reduce_op), dtypes in refused.items():
        by_dtypes[(reduce_op, tuple(sorted(dtypes)))].add(collective)
    parts = []
    for (reduce_op, dtypes), collectives in sorted(by_dtypes.items()):
        where = (
            "every collective with it"
            if collectives == took[reduce_op]
            else ", ".join(sorted(collectives))
        )
        op = "" if reduce_op == "none" else f"{reduce_op} "
        parts.append(f"{op}in {', '.join(dtypes)}: {where}")
    c10d = sorted({k[0] for k in refused})
    return [
        f"conformance: collectives: {'/'.join(c10d)} refuses (skipped; torch defines no result, "
        f"or NCCL or gloo refuses too): {'; '.join(parts)}"
    ]


class Collectives(Family):
    name = "collectives"
    folder = "collectives"
    rank = 20
    manifest_prefix = "collectives"
    manifest_field = "collective_key"  # `<c10d>:<case id>`
    check = "collectives"
    findings = MappingProxyType({"spans": "collective"})  # sizes, worlds, reduce ops, modes
    options = CollectivesOptions

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_collective_record(suite, nodeid, status, self.plan(suite), **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return collective_record(suite, self.plan(suite), item, report)

    def make_plan(self, suite: Suite) -> CollectivesPlan:
        # `--collectives-set auto` is the default selection where the run is this family's alone
        return collectives_plan(suite.options, suite.backend, suite.alone == self.name)

    def judged_keys(self, pattern: str, keys: list[str]) -> list[str]:
        # a pattern is judged against the cases of its own c10d backend only
        c10d = pattern.split(":")[1]
        return [k for k in keys if k.split(":")[1] == c10d]

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_collective(suite, self.plan(suite), item)

    def header_lines(self, suite: Suite) -> list[str]:
        return collectives_header(self.plan(suite))

    def end_notes(self, records: list[CaseRecord]) -> list[str]:
        return refusals(records)


FAMILY = Collectives()
