"""A manifest that expects what a run found: the baseline, computed from the run's records.

One `[[entry]]` per finding (`conformance/findings.py`: one root cause) and per group of
`unsupported` cases (grouped the same way), in the format of `conformance/harness/expectations.py`:
status `xfail` pinned to the checks its cases failed (`crash` for crashes: the case that
corrupted memory when the culprit search named one, else the crashed cases; `skip` for hangs;
`unsupported` for kernels the device lacks), category and reason from the finding, the
representative's repro as a comment. Cases a manifest already expected (xfailed, declared
unsupported) keep their entry as written when its file can be read (else one is rebuilt), so the
written manifest is complete: the next run with it alone has no unexpected failure, and stays
strict (a fixed bug fails with "remove this entry").

Patterns are as narrow as the cases they cover (`case_patterns.py`). With runs of several torch
versions (`split`), cases that fail alike in every version go to `common.toml`, the rest to
`torch-<minor>.toml`; cases that differ between allocator modes of one torch get
`allocator = "..."`. `pytest conformance --write-expectations FILE` writes it at the end of a
run (session.py); `python -m conformance.measure.baseline RESULTS` from results folders.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import ConformanceUsageError
from conformance.findings import Finding, category_of
from conformance.harness.baseline_contexts import Context, case_id, contexts_of
from conformance.harness.baseline_text import entry_text, manifest_header
from conformance.harness.case_patterns import DIMENSIONS, patterns_for
from conformance.harness.expectations import (
    Entry,
    Manifest,
    failure_head,
    failure_key,
)
from conformance.harness.families import registry
from conformance.harness.found import expected_crash, expected_status, found
from conformance.record import CaseId, CaseRecord

__all__ = ("Baseline", "Context", "baseline", "contexts_of", "write")

#: a dtype unsupported in this many ops gets a hint to declare it in one line
DTYPE_HINT_OPS = 5


# ---- groups: what one entry stands for ---------------------------------------------------------
@dataclass
class Group:
    """The cases of one root cause that one entry expects, per context."""

    key: tuple[str, ...]
    status: str  # the entry's status: xfail | unsupported | crash | skip
    category: str
    reason: str
    comment: str = ""
    carried: Entry | None = None  # an entry of an earlier manifest, kept as written
    checks: set[str] = field(default_factory=set)
    failures: set[str] = field(default_factory=set)  # xfail: the failures pinned (masked)
    members: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # context -> ids

    def pin(self, record: CaseRecord) -> None:
        """An xfail entry expects this record's check and its failure, as worded."""
        if record.check:
            self.checks.add(str(record.check))
        head = failure_head(record.message or "")
        if head:
            self.failures.add(failure_key(head))


def _reason(finding: Finding) -> str:
    """The finding's title without the advice to declare it."""
    text = finding.title.split("; not declared:")[0]
    return text + (f" ({finding.factor})" if finding.factor else "")


def _comment(finding: Finding, flaky: Mapping[str, str]) -> str:
    rep = finding.representative
    lines = [f"{finding.id}: {finding.count} case(s) in {', '.join(finding.ops[:8])}"]
    if rep.repro:
        lines.append(f"repro: {rep.repro}")
    shaky = [case.id for case in finding.cases if case.id in flaky]
    if shaky:  # an xfail of a case that also passes xpasses on those nights
        lines.append(
            f"FLAKY: {len(shaky)} of its case(s) also pass on the same configuration (results "
            f"store), so this entry can xpass; e.g. {shaky[0]}: {flaky[shaky[0]]}"
        )
    return "\n".join(lines)


def _finding_groups(
    ctx: Context, groups: dict[tuple[str, ...], Group], flaky: Mapping[str, str]
) -> None:
    """The failing cases of a context, one group per finding and entry status (harness/found.py:
    what the run found); an unsupported finding has one group per kernel the device lacks."""
    records = [r for case, r in ctx.records.items() if case not in ctx.differing]
    for item in found(records):
        finding, record, status = item.finding, item.record, item.status
        key: tuple[str, ...] = ("finding", finding.id, item.own or status)
        reason = _reason(finding)
        if item.kernel:
            key += (item.kernel,)
            reason = f"the device has no kernel for {item.kernel} where cpu computes"
        group = groups.get(key)
        if group is None:
            comment = _comment(finding, flaky)
            group = groups[key] = Group(key, status, category_of(record), reason, comment)
        case = item.culprit or case_id(record)
        group.members.setdefault((ctx.minor, ctx.allocator), set()).add(str(case))
        if status == "xfail":
            group.pin(record)


def _carried_groups(
    ctx: Context, manifest: Manifest, groups: dict[tuple[str, ...], Group], dtypes: set[str]
) -> None:
    """Cases an earlier manifest expected, grouped by the entry that expected them; an entry
    whose cases all still need it is kept as written, one with a case that passes now is
    narrowed to the others."""
    known = {e.source: e for e in manifest.entries}
    for case, record in ctx.records.items():
        if case in ctx.differing:
            continue
        if record.extra.get("unsupported_dtype"):
            dtypes.add(record.dtype)
            continue
        source = record.expected_by
        if not source:
            continue
        status = expected_status(record)
        entry = known.get(source)
        if entry is None or entry.matching(case) is None:
            # the source names another entry (the file was edited since, or an older run
            # wrote one source for two entries): the entry is the one that matches the case
            entry = manifest.match(case, ctx.allocator) or entry
            source = entry.source if entry is not None else source
        key = ("carried", source)
        group = groups.get(key)
        if group is None:
            category = record.category or (entry.category if entry else "flaky")
            # the entry's own reason, as the run noted it: never a machine's path and line
            noted = record.extra.get("expected_reason") or failure_key(
                failure_head(record.message or "") or "expected by an earlier manifest"
            )
            reason = entry.reason if entry else noted
            if status == "skip" and entry is None and expected_crash(record):
                status = "crash"
            group = groups[key] = Group(
                key, entry.status if entry else status or "xfail", category, reason, carried=entry
            )
        if status is None:  # passes now (xpassed): the entry cannot stay as written
            group.carried = None if group.carried is None else _narrowed(group.carried)
            continue
        group.members.setdefault((ctx.minor, ctx.allocator), set()).add(case)
        if record.status == "xfailed":
            group.pin(record)


def _narrowed(entry: Entry) -> Entry:
    """The entry with its patterns to be recomputed (no patterns: narrow ones are written)."""
    return Entry((), entry.status, entry.category, entry.reason, entry.source, entry.link,
                 entry.allocator, entry.checks)  # fmt: skip


# ---- where each case goes: common, torch-<minor>, allocator ------------------------------------
@dataclass
class Placed:
    """One entry to write: a group's cases for one file (and allocator)."""

    group: Group
    patterns: list[str]
    allocator: str = ""
    count: int = 0


def _everywhere(case: str, group: Group, contexts: Sequence[Context]) -> bool:
    """Whether `case` is in the group in every context that collected it."""
    return all(
        case in group.members.get((c.minor, c.allocator), set())
        for c in contexts
        if case in c.records
    )


def _place(group: Group, contexts: Sequence[Context], split: bool) -> dict[str, list[Placed]]:
    """{file name: entries} for one group; file "" is the one manifest when not split. An
    entry carried over as written goes to the file of its name (torch-<minor>.toml), else to
    common.toml."""
    universes = {(c.minor, c.allocator): c.universe for c in contexts}
    out: dict[str, list[Placed]] = {}
    cases = set().union(*group.members.values()) if group.members else set()
    if not cases:
        return out
    kept = group.carried
    if kept is not None and kept.patterns:
        name = os.path.basename(kept.source.rsplit(":", 1)[0])
        target = "" if not split else name if name.startswith("torch-") else "common.toml"
        return {target: [Placed(group, list(kept.patterns), kept.allocator, len(cases))]}
    if not split:
        common = {c for c in cases if _everywhere(c, group, contexts)}
        placed = [(common, contexts, "")]
        for ctx in contexts:  # only what differs between allocator modes
            own = group.members.get((ctx.minor, ctx.allocator), set()) - common
            placed.append((own, [ctx], ctx.allocator))
        out[""] = _entries(group, placed, universes)
        return out
    common = {c for c in cases if _everywhere(c, group, contexts)}
    out["common.toml"] = _entries(group, [(common, contexts, "")], universes)
    for minor in sorted({c.minor for c in contexts}):
        mine = [c for c in contexts if c.minor == minor]
        left = set().union(*(group.members.get((c.minor, c.allocator), set()) for c in mine))
        left -= common
        both = {c for c in left if _everywhere(c, group, mine)}
        placed = [(both, mine, "")]
        for ctx in mine:
            own = group.members.get((ctx.minor, ctx.allocator), set()) - common - both
            placed.append((own, [ctx], ctx.allocator))
        out[f"torch-{minor}.toml"] = _entries(group, placed, universes)
    return out


def _entries(group: Group, placed, universes) -> list[Placed]:
    out = []
    for cases, contexts, allocator in placed:
        if not cases:
            continue
        keys = [(c.minor, c.allocator) for c in contexts]
        dims = frozenset(DIMENSIONS).intersection(*(c.complete for c in contexts))
        patterns = patterns_for(
            cases,
            {k: group.members.get(k, set()) for k in keys},
            {k: universes[k] for k in keys},
            dims,
        )
        out.append(Placed(group, patterns, allocator if len(contexts) == 1 else "", len(cases)))
    return out


@dataclass
class Baseline:
    """The manifests to write ({file name: text}; "" is the single file) and what they hold."""

    files: dict[str, str]
    findings: int
    unsupported: int
    carried: int
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (
            f"{self.findings} finding(s), {self.unsupported} unsupported group(s), "
            f"{self.carried} entr{'y' if self.carried == 1 else 'ies'} carried over"
        )


def dtype_hints(groups: Iterable[Group]) -> list[str]:
    """A hint per dtype that many ops lack: one line declares a whole dtype."""
    ops: dict[str, set[str]] = {}
    for g in groups:
        if g.status != "unsupported":
            continue
        for case in set().union(*g.members.values()):
            if registry().of_key(case) is not None:
                continue
            c = CaseId.parse(case)
            kernel = g.key[3] if g.key[0] == "finding" and len(g.key) > 3 else c.overload
            if kernel == c.overload:  # its own kernel missing, not one it needs
                ops.setdefault(c.dtype, set()).add(c.overload)
    return [
        f"# {dtype}: unsupported in {len(names)} ops; if the device has no {dtype} at all, "
        f'replace their entries with one line: unsupported_dtypes = ["{dtype}"]'
        for dtype, names in sorted(ops.items())
        if len(names) >= DTYPE_HINT_OPS
    ]


def baseline(
    runs: Sequence[tuple[Mapping[str, Any], Iterable[CaseRecord]]],
    manifest: Manifest | None = None,
    *,
    split: bool = False,
    source: str = "",
    flaky: Mapping[str, str] | None = None,
) -> Baseline:
    """The manifest(s) that expect what `runs` found; `manifest`: the one the runs used (its
    entries are carried over as written); `split`: common.toml + torch-<minor>.toml; `flaky`:
    case id -> why the results store calls it flaky (its entry says so)."""
    contexts = contexts_of(runs)
    minors = sorted({c.minor for c in contexts})
    if not split and len(minors) > 1:
        raise ConformanceUsageError(
            f"results of several torch versions ({', '.join(minors)}): write one manifest per "
            "version with --dir DIR (common.toml + torch-<minor>.toml)"
        )
    manifest = manifest or Manifest()
    groups: dict[tuple[str, ...], Group] = {}
    dtypes: set[str] = set()
    for ctx in contexts:
        _carried_groups(ctx, manifest, groups, dtypes)
        _finding_groups(ctx, groups, flaky or {})
    texts: dict[str, list[str]] = {}
    for key in sorted(groups, key=lambda k: (k[0] != "carried", k)):
        for name, entries in _place(groups[key], contexts, split).items():
            texts.setdefault(name, []).extend(
                entry_text(p.group, p.patterns, p.allocator) for p in entries
            )
    warnings = [
        f"torch {c.minor} ({c.allocator}): {len(c.differing)} case(s) recorded with different "
        "statuses by runs of one torch and allocator (flaky, or a sanitizer build): not written"
        for c in contexts
        if c.differing
    ]
    header = manifest_header(
        [(c.minor, c.allocator) for c in contexts], source, dtype_hints(groups.values())
    )
    files = {}
    names = set(texts) | ({"common.toml"} if split else {""})
    for name in sorted(names):
        top = [f"unsupported_dtypes = {json.dumps(sorted(dtypes))}\n"] if dtypes else []
        if name not in ("", "common.toml"):
            top = []
        files[name] = "\n".join([header, *top, *texts.get(name, [])])
    kinds = Counter(k[0] if k[0] == "carried" else k[2] for k in groups)
    return Baseline(
        files,
        findings=len({k[1] for k in groups if k[0] == "finding" and k[2] != "unsupported"}),
        unsupported=kinds["unsupported"],
        carried=len({k[1] for k in groups if k[0] == "carried"}),
        warnings=warnings,
    )


def write(result: Baseline, output: str | None, directory: str | None) -> list[str]:
    """Write the files; returns their paths."""
    written = []
    for name, text in result.files.items():
        path = Path(directory or ".") / name if name else Path(output or "-")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(str(path))
    return written


def write_run_baseline(suite: Any, info: dict, records: list[CaseRecord], not_run: int) -> str:
    """--write-expectations FILE: a manifest expecting what this run found; the summary's note."""
    path = suite.options.write_expectations
    result = baseline([(info, records)], suite.manifest, source="this run")
    if not_run:
        result.warnings.append(f"{not_run} case(s) did not run: nothing expects them")
    write(result, path, None)
    return (
        f"conformance: wrote {path} ({result.describe()}); run again with --expectations "
        f"{path}" + "".join(f"\nconformance: warning: {w}" for w in result.warnings)
    )
