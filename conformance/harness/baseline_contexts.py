"""The runs a baseline is written from, as contexts: the cases of one torch minor and allocator
mode (one or several runs: shards, sanitizer builds) by case id, and which dimensions of a case
id the runs collected in full (harness/baseline.py groups and places them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.engine.layout_names import LAYOUT_HELP
from conformance.harness.case_patterns import DIMENSIONS
from conformance.harness.families import registry
from conformance.harness.options import DEFAULT_DTYPES, DEFAULT_MODES, PATHS, VALUE_SETS
from conformance.record import OP_FAMILY, CaseId, CaseRecord, torch_minor


@dataclass
class Context:
    """The cases of one torch minor and allocator mode (one or several runs: shards, sanitizer
    builds), by case id (the part in [...])."""

    minor: str
    allocator: str
    records: dict[str, CaseRecord] = field(default_factory=dict)
    differing: set[str] = field(default_factory=set)  # statuses differ between its runs
    complete: frozenset[int] = frozenset(DIMENSIONS)  # dimensions no run of it narrowed

    @property
    def universe(self) -> set[str]:
        return set(self.records)


def complete_dimensions(meta: Mapping[str, Any]) -> frozenset[int]:
    """The dimensions of a case id a run collected in full (run.json "selection"): those its
    options did not narrow below the default (--dtypes, --layouts, --paths, --values/--modes),
    none after a -k. A pattern may say `*` only there: elsewhere a fuller run would collect
    cases the run never saw. Results without a selection (an older suite) count as full."""
    sel = meta.get("selection")
    if not isinstance(sel, Mapping):
        return frozenset(DIMENSIONS)
    if sel.get("keyword"):
        return frozenset()
    full = {
        1: set(DEFAULT_DTYPES.split(",")),
        2: set(LAYOUT_HELP),
        3: set(PATHS),
        4: {*VALUE_SETS, *DEFAULT_MODES},  # --modes compile is on request only
    }
    chosen = {
        1: sel.get("dtypes"),
        2: sel.get("layouts"),
        3: sel.get("paths"),
        4: [*(sel.get("values") or []), *(sel.get("modes") or [])],
    }
    return frozenset(d for d in DIMENSIONS if full[d] <= set(chosen[d] or ()))


def case_id(record: CaseRecord) -> str | None:
    """The case id of a record (`scenario:<name>`, `contract:<item>` for a family's case), None
    if it has none."""
    if record.family != OP_FAMILY:
        return registry().record_key(record)
    try:
        return str(CaseId.parse(record.id))
    except ValueError:
        return None


def contexts_of(
    runs: Iterable[tuple[Mapping[str, Any], Iterable[CaseRecord]]],
) -> list[Context]:
    """Merge runs (run.json meta, case records) by (torch minor, allocator); a case recorded by
    two runs of one context with different statuses is left out of the baseline (warned)."""
    found: dict[tuple[str, str], Context] = {}
    for meta, records in runs:
        complete = complete_dimensions(meta)
        for record in records:
            case = case_id(record)
            if case is None:
                continue
            minor = torch_minor(str(record.torch or meta.get("torch") or "?"))
            allocator = str(record.allocator or meta.get("allocator") or "")
            ctx = found.setdefault((minor, allocator), Context(minor, allocator))
            ctx.complete &= complete
            seen = ctx.records.get(case)
            if seen is not None and seen.status != record.status:
                ctx.differing.add(case)
            ctx.records[case] = record
    return sorted(found.values(), key=lambda c: (c.minor, c.allocator))
