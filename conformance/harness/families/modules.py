"""The nn module cases (`conformance/modules`, docs/MODULES.md) as records: one per collected case
of the run's plan (torch's `module_db`: module, dtype, train/eval, memory format, sample; engine/
modules/), also for a case that hung, crashed or never ran; the manifest's expectations of them
(`module:<case id>`: xfail, skip, crash, unsupported; strict); a failure names what differed and
the first op that diverged (`diverged` in the record), a device without a kernel the module needs
is `unsupported` (undeclared: a failure naming the kernel). The plan: the `core` selection in a
run of every family, `full` where the command line names conformance/modules alone."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from conformance.engine.modules.cases import CORE_SAMPLES, ModuleCase, cached_cases
from conformance.harness.families.base import Family
from conformance.harness.families.expectations import (
    expect_family,
    expected_by,
    report_message,
    unexpected_pass,
)
from conformance.harness.nodes import left_verdict, record_id
from conformance.harness.verdicts import undeclared
from conformance.record import CaseRecord, Status, missing_kernel

if TYPE_CHECKING:
    from conformance.harness.suite import Suite

WHAT = MappingProxyType(
    {
        "core": f"float32, train and eval, the first {CORE_SAMPLES} samples of each module",
        "full": "every dtype of the ModuleInfo within --dtypes, train and eval, every sample",
    }
)


@dataclass(frozen=True)
class ModulesPlan:
    """The module cases of this run, and the ModuleInfos without any (with why)."""

    selection: str
    cases: tuple[ModuleCase, ...]
    without: dict[str, str]


def case_id(nodeid: str) -> str:
    """The module case id of a node id (`test_module[<case id>]`)."""
    name = record_id(nodeid)
    return name[name.index("[") + 1 : -1] if "[" in name else name


def new_module_record(suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
    """A record of the module case `nodeid` (a hang, crash or not-run passes its message)."""
    name = case_id(nodeid)
    try:
        case: ModuleCase | None = ModuleCase.parse(name)
    except ValueError:
        case = None
    record = FAMILY.case_record(
        suite,
        nodeid,
        status,
        name,
        op="module",
        overload=case.module if case else name,
        dtype=case.dtype if case else "-",
        layout=case.memory_format if case else "-",
        path=("train" if case.training else "eval") if case else "module",
        **values,
    )
    backend = f" --backend {suite.backend.spec}" if suite.backend.spec else ""
    record.extra["script"] = f"python -m conformance.engine.modules {name}{backend}"
    return record


def module_record(suite: Suite, item: pytest.Item, report: pytest.TestReport) -> CaseRecord:
    """The record of a module case from its verdict (left on the item) and pytest report."""
    message = report_message(report)
    record = new_module_record(suite, item.nodeid, Status.PASSED, message=message)
    key = FAMILY.manifest_key(record.extra["module_case"])
    entry = expected_by(suite, record, key)
    if unexpected_pass(
        record, entry, key, report, f"the module case {record.extra['module_case']}"
    ):
        return record
    verdict = left_verdict(item)
    if verdict is not None and verdict.notes:
        record.extra["notes"] = list(verdict.notes)
    if report.skipped and (message or "").startswith("unsupported"):
        record.status = Status.UNSUPPORTED
    if not report.failed:
        return record
    record.check = FAMILY.check
    if verdict is not None and verdict.check:
        record.extra["differs"] = verdict.check  # output, grad, state, state_dict
        record.message = failure_message(record.overload, verdict.message, verdict.diverged)
        if verdict.diverged:
            record.extra["diverged"] = verdict.diverged
        elif verdict.searched:
            record.message += "\n  no single op diverged from CPU on its own inputs"
        return record
    missing = missing_kernel(message)
    if missing is not None:
        record.check = "unsupported"
        record.message = undeclared(
            f"[unsupported] the device has no kernel for {missing}, which the module "
            f"{record.overload} needs ({message})"
        )
    return record


def op_scales() -> dict[str, Any]:
    """The op specs' tolerance scales, for the search for the op that diverged (it judges each
    op at its op case's tolerance; the engine's search child receives them)."""
    from conformance.ops import tolerance_scales

    return tolerance_scales()


def failure_message(module: str, differs: str, diverged: str | None) -> str:
    """A failed case's message. Its first line, which keys its finding, is the op that diverged
    where the search found one (`[module] aten.native_batch_norm.default: running_var after the
    call ...`: every module that op breaks is one finding), else the module and what differed;
    the next lines say the other."""
    if diverged and not diverged.startswith(("not found", "not searched")):
        return f"[module] {diverged}\n  in {module}: {differs}"
    searched = f"\n  first op that diverged: {diverged}" if diverged else ""
    return f"[module {module}] {differs}{searched}"


def unsupported_skip(suite: Suite, nodeid: str, exc: BaseException) -> str | None:
    """The skip reason of a case whose device step lacks a kernel the manifest declares it
    unsupported for (`module:<case id>` with status unsupported), else None."""
    missing = missing_kernel(str(exc))
    entry = suite.expectations.family_expectation(FAMILY.manifest_key(case_id(nodeid)))
    if missing is None or entry is None or entry.status != "unsupported":
        return None
    return f"unsupported: the device has no kernel for {missing}; declared at {entry.source}"


def header_lines(plan: ModulesPlan) -> list[str]:
    """The family's run header lines: the selection, and the ModuleInfos without cases."""
    modules = len({c.module for c in plan.cases})
    lines = [
        f"modules: torch's module_db, selection {plan.selection} ({WHAT[plan.selection]}; "
        f"channels_last too where the input is 4-d or 5-d): {len(plan.cases)} cases of "
        f"{modules} modules; forward, backward and state against CPU, a state_dict round trip "
        "(docs/MODULES.md)"
    ]
    if plan.without:
        listed = "; ".join(f"{m}: {why}" for m, why in sorted(plan.without.items()))
        lines.append(f"modules: {len(plan.without)} without cases: {listed}")
    return lines


def end_notes(records: list[CaseRecord]) -> list[str]:
    """What the family could not compare: random modules' values, cases CPU refuses."""
    random = sorted(
        {
            r.overload
            for r in records
            if any(str(n).startswith("random") for n in r.extra.get("notes", ()))
        }
    )
    refused = [
        r for r in records if r.status is Status.SKIPPED and "CPU's own" in (r.message or "")
    ]
    lines = []
    if random:
        lines.append(
            f"conformance: modules: values not compared where the module is random in its mode "
            f"(dtypes and shapes are): {', '.join(random)}"
        )
    if refused:
        lines.append(
            f"conformance: modules: {len(refused)} case(s) not applicable: CPU's own step "
            "raises (each record says how)"
        )
    return lines


class Modules(Family):
    name = "modules"
    folder = "modules"
    rank = 25
    manifest_prefix = "module"  # `module:<case id>`
    manifest_field = "module_case"
    check = "module"

    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        return new_module_record(suite, nodeid, status, **values)

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        return module_record(suite, item, report)

    def make_plan(self, suite: Suite) -> ModulesPlan:
        selection = "full" if suite.alone == self.name else "core"
        cases, without = cached_cases(selection, suite.options.dtypes, suite.cache_dir)
        return ModulesPlan(selection, tuple(cases), without)

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        expect_family(suite, item, self.manifest_key(case_id(item.nodeid)))

    def header_lines(self, suite: Suite) -> list[str]:
        return header_lines(self.plan(suite))

    def end_notes(self, records: list[CaseRecord]) -> list[str]:
        return end_notes(records)


FAMILY = Modules()
