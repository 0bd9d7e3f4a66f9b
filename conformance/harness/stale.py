"""Manifest entries that no longer say anything: patterns that match no case of the run's full
matrix (nor any scenario; under -k the matrix's cases are named without building a sample, a
superset), and `unsupported_dtypes` that no case needed. Judged only when the
run was not narrowed by --ops/--dtypes/--layouts/--paths (scenario entries: nor by -k/-m, which
deselect scenarios the run never sees); reported at the end of the run."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from conformance.engine.layout_names import LAYOUT_HELP
from conformance.harness.cases import CaseList
from conformance.harness.expectations import Entry, Manifest
from conformance.harness.families import registry
from conformance.harness.options import DEFAULT_DTYPES, MODES, PATHS, parse_dtypes
from conformance.harness.sampling import dtype_name
from conformance.record import CaseRecord, Status


def stale_of_run(suite: Any, config: pytest.Config, records: list[CaseRecord]) -> list[str]:
    """`stale_expectations` of a run as its options and pytest's selection narrowed it."""
    by_keyword = bool(config.option.keyword or config.option.markexpr)
    return stale_expectations(
        suite.manifest,
        suite.case_list,
        records,
        suite.allocator,
        by_keyword,
        families_only=registry().targets_only(config),
    )


def stale_expectations(
    manifest: Manifest,
    cases: CaseList,
    records: list[CaseRecord],
    allocator: str,
    selected_by_keyword: bool = False,
    families_only: bool = False,
) -> list[str]:
    """One line per stale pattern or dtype declaration ([] for a narrowed run, and for a run
    of the families alone: it has no op case to judge an entry by)."""
    o = cases.options
    narrowed = (
        families_only
        or o.ops
        or o.dtypes != parse_dtypes(DEFAULT_DTYPES)
        or len(o.layouts) < len(LAYOUT_HELP)
        or len(o.paths) < len(PATHS)
    )
    if narrowed:
        return []
    patterns = [p for e in manifest.entries for p in e.patterns]
    all_cases = cases.matrix_cases(_NamedBy(patterns))
    ids = [str(case) for case in all_cases]
    # no fallback path on a backend that cannot route (under -k: the paths of the ids built,
    # so a pattern of a path none of them has is not judged: never called stale wrongly)
    paths = {case.path for case in all_cases}
    run = set(cases.registered) | set(cases.fallback_only)
    reachable = set(cases.coverage.fallback_only) if cases.coverage is not None else set()

    def judged(pattern: str) -> bool:
        """Fallback-only overloads outside this run's set (--fallback-ops) are not run, so
        their entries cannot be judged, nor patterns of a path this backend has no case of
        (no boxed fallback, no routing) or of a mode the run left out (--modes: an entry for
        -compile cases in a run without them); entries naming any other op can."""
        parts = pattern.split("-")
        if len(parts) > 3 and parts[3] in PATHS and parts[3] not in paths:
            return False
        if parts[-1] in MODES and parts[-1] not in o.modes:
            return False
        op = parts[0]
        if any(fnmatch.fnmatchcase(r, op) for r in run):
            return True
        return not any(fnmatch.fnmatchcase(r, op) for r in reachable)

    # -k/-m: the scenarios and contract cases left out are not known here: no entry is judged
    families = registry()
    ran: dict[str, list[str]] = {}  # family -> the keys of its records
    for r in [] if selected_by_keyword else records:
        key = families.record_key(r)
        if key is not None:
            ran.setdefault(r.family, []).append(key)

    def matches_none(entry: Entry, pattern: str) -> bool:
        family = families.of_key(pattern)
        if family is not None:  # judged when the family ran
            keys = family.judged_keys(pattern, ran.get(family.name, []))
            return bool(keys) and not any(entry.matching(i) for i in keys)
        return judged(pattern) and not any(fnmatch.fnmatchcase(i, pattern) for i in ids)

    stale = [
        f"{e.status} entry {p!r} at {e.source} matches no case of the matrix; remove it or "
        "fix the pattern"
        for e in manifest.entries
        if not e.allocator or e.allocator == allocator
        for p in e.patterns
        if matches_none(Entry((p,), e.status, e.category, e.reason, e.source), p)
    ]
    if selected_by_keyword:  # the cases an unsupported_dtypes line is needed by may not have run
        return stale
    needed = {r.dtype for r in records if r.status is Status.UNSUPPORTED}
    stale += [
        f"unsupported_dtypes {d!r} at {source}: no {d} case was unsupported; remove it"
        for d, source in manifest.unsupported_dtypes.items()
        if d not in needed and any(dtype_name(x) == d for x in o.dtypes)
    ]
    return stale


class _NamedBy:
    """Keeps the case ids the manifest's patterns could name: where the stale check builds the
    matrix anew (under -k), an overload no pattern could name builds no id. An id is
    `<overload>-<word>-...` and neither an overload nor a word has a `-`, so each literal piece
    of a pattern's first part (up to its first `-`; `_pieces`) lies within one part of an id
    it matches: without a wildcard that part is the overload itself; with one, each piece must
    be in the overload or in a word the run's ids may have (a superset: `CaseList._id_words`)."""

    def __init__(self, patterns: list[str]) -> None:
        self.firsts = [_pieces(p) for p in patterns]

    def __call__(self, case_id: str) -> bool:
        return True

    def may_keep(self, overload: str, words: list[str]) -> bool:
        return any(
            overload == first
            if pieces is None
            else all(p in overload or any(p in w for w in words) for p in pieces)
            for first, pieces in self.firsts
        )


def _pieces(pattern: str) -> tuple[str, list[str] | None]:
    """A pattern's first part (up to its first `-` outside a bracket class) and its literal
    pieces between wildcards (`*`, `?`, a class, any of which may match a `-`), as fnmatch
    reads them: a class is `[...]` or `[!...]` whose first member may be `]`, and a `[` that
    no `]` closes is a literal; None: the first part has no wildcard."""
    pieces, piece, wild, i = [], "", False, 0
    while i < len(pattern) and pattern[i] != "-":
        ch, end = pattern[i], i + 1
        if ch == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "!")
            j += pattern[j : j + 1] == "]"
            close = pattern.find("]", j)
            end = close + 1 if close >= 0 else end
        if ch in "*?" or end > i + 1:
            pieces, piece, wild = [*pieces, piece], "", True
        else:
            piece += ch
        i = end
    return pattern[:i], [p for p in [*pieces, piece] if p] if wild else None
