"""A cell over its runs: the findings new and fixed since the previous run, a finding's
timeline, pass rates by family, dtype or check, and the run's time and speed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import func, select

from conformance.history.runs import BAD, GOOD, QuestionError, RunGroup, Runs, flips
from conformance.history.schema import CASE_NAMES, FINDINGS, RESULTS, chunks

#: what pass rates can be grouped by: a case_names column, or the failing check
RATE_KEYS = ("family", "dtype", "layout", "path", "op", "check")


@dataclass
class FindingRow:
    """A finding of one run, as the store keeps it."""

    finding: str
    title: str
    check: str | None
    cases: int
    representative: str
    repro: str
    note: str = ""  # for a fixed finding: fixed, not run, or failing under another finding


@dataclass
class Changes:
    """The findings of the cell's latest run against its previous run."""

    cell: str
    latest: RunGroup
    previous: RunGroup | None
    new: list[FindingRow] = field(default_factory=list)
    fixed: list[FindingRow] = field(default_factory=list)
    unjudged: list[FindingRow] = field(default_factory=list)  # its cases did not run now
    moved: list[FindingRow] = field(default_factory=list)  # its cases fail under another id
    kept: int = 0


def findings_of(runs: Runs, group: RunGroup) -> dict[str, FindingRow]:
    """The findings of one run (its shards' together)."""
    out: dict[str, FindingRow] = {}
    query = select(FINDINGS).where(FINDINGS.c.run_id.in_(group.run_ids))
    for row in runs.conn.execute(query):
        have = out.get(row.finding)
        if have is not None:
            have.cases += row.cases
            continue
        out[row.finding] = FindingRow(
            row.finding, row.title, row.check_name, row.cases, row.representative, row.repro
        )
    return out


def _statuses(runs: Runs, group: RunGroup, case_ids: list[int]) -> dict[int, tuple[str, str]]:
    """Each case's status and finding in the run (in chunks: any finding's size)."""
    out = {}
    for chunk in chunks(case_ids):
        query = select(RESULTS.c.case_id, RESULTS.c.status, RESULTS.c.finding).where(
            RESULTS.c.run_id.in_(group.run_ids), RESULTS.c.case_id.in_(chunk)
        )
        out.update((r.case_id, (r.status, r.finding or "")) for r in runs.conn.execute(query))
    return out


def changes(runs: Runs, cell: str) -> Changes:
    """New, fixed, unjudged and moved findings of the cell's latest run."""
    groups = runs.of_cell(cell)
    if not groups:
        raise QuestionError(f"every run of {cell} was pruned: its findings are in `finding`")
    latest = groups[-1]
    previous = groups[-2] if len(groups) > 1 else None
    result = Changes(cell, latest, previous)
    now = findings_of(runs, latest)
    before = findings_of(runs, previous) if previous else {}
    result.new = [f for key, f in now.items() if key not in before]
    result.kept = sum(key in before for key in now)
    for key, finding in before.items():
        if key in now:
            continue
        assert previous is not None
        query = select(RESULTS.c.case_id).where(
            RESULTS.c.run_id.in_(previous.run_ids), RESULTS.c.finding == key
        )
        ids = [row.case_id for row in runs.conn.execute(query)]
        today = _statuses(runs, latest, ids)
        failing = sorted({f for status, f in today.values() if status in BAD})
        judged = sum(status in GOOD for status, _ in today.values())
        if not failing and not judged:  # not run, or skipped/unsupported now: nothing says
            finding.note = f"none of its {len(ids)} case(s) was judged in the latest run"
            result.unjudged.append(finding)
        elif failing:
            finding.note = "its cases fail under " + ", ".join(f or "no finding" for f in failing)
            result.moved.append(finding)
        else:
            finding.note = f"{judged} of its {len(ids)} case(s) pass now"
            result.fixed.append(finding)
    return result


@dataclass
class FindingTimeline:
    """A finding in every run of a cell: its case count there (0: absent)."""

    finding: str
    title: str
    cell: str
    counts: list[tuple[RunGroup, int]]

    @property
    def first_seen(self) -> RunGroup | None:
        return next((g for g, n in self.counts if n), None)

    @property
    def last_seen(self) -> RunGroup | None:
        return next((g for g, n in reversed(self.counts) if n), None)

    @property
    def flips(self) -> int:
        return flips([bool(n) for _, n in self.counts])


def finding_timeline(runs: Runs, finding: str, cell: str) -> FindingTimeline:
    """Where the finding (its id, `F1a2b3c4d`) appears among the cell's runs."""
    groups = runs.of_cell(cell, with_cases=False)
    query = select(FINDINGS.c.run_id, FINDINGS.c.cases, FINDINGS.c.title).where(
        FINDINGS.c.finding == finding
    )
    per_group: Counter[str] = Counter()
    title = ""
    for row in runs.conn.execute(query):
        group = runs.of_run[row.run_id]
        if group.cell == cell:
            per_group[group.group] += row.cases
            title = row.title
    return FindingTimeline(finding, title, cell, [(g, per_group[g.group]) for g in groups])


@dataclass
class Rates:
    """Per key (a family, a dtype, a check ...), the share of judged cases that passed in each
    run; for ``check``, the failing cases per check."""

    cell: str
    by: str
    runs: list[RunGroup]
    table: dict[str, list[float | None]]  # key -> one value per run (None: no judged case)


def rates(runs: Runs, cell: str, by: str, last: int = 10) -> Rates:
    """Pass rates (or, by check, failing counts) of the cell's last ``last`` runs."""
    groups = runs.of_cell(cell)[-last:]
    column = RESULTS.c.check_name if by == "check" else CASE_NAMES.c[by]
    ids = [i for g in groups for i in g.run_ids]
    query = (
        select(RESULTS.c.run_id, column.label("key"), RESULTS.c.status, func.count().label("n"))
        .join(CASE_NAMES, CASE_NAMES.c.id == RESULTS.c.case_id)
        .where(RESULTS.c.run_id.in_(ids))
        .group_by(RESULTS.c.run_id, column, RESULTS.c.status)
    )
    good: Counter[tuple[str, str]] = Counter()
    bad: Counter[tuple[str, str]] = Counter()
    for row in runs.conn.execute(query):
        group = runs.of_run[row.run_id].group
        key = row.key or "-"
        if row.status in GOOD:
            good[key, group] += row.n
        elif row.status in BAD:
            bad[key, group] += row.n
    keys = sorted({k for k, _ in good} | {k for k, _ in bad})
    if by == "check":
        keys = [k for k in keys if k != "-" and any(bad[k, g.group] for g in groups)]
        table = {k: [float(bad[k, g.group]) for g in groups] for k in keys}
        return Rates(cell, by, groups, table)
    table = {}
    for key in keys:
        values: list[float | None] = []
        for g in groups:
            judged = good[key, g.group] + bad[key, g.group]
            values.append(good[key, g.group] / judged if judged else None)
        table[key] = values
    return Rates(cell, by, groups, table)


@dataclass
class RunTime:
    """A run's time and speed, with its hung (timed-out) cases."""

    run: RunGroup
    hung: int


def run_times(runs: Runs, cell: str, last: int = 30) -> list[RunTime]:
    """The cell's last ``last`` runs: wall time, machine time, cases a second, timeouts."""
    groups = runs.of_cell(cell, with_cases=False)[-last:]
    ids = [i for g in groups for i in g.run_ids]
    query = (
        select(RESULTS.c.run_id, func.count().label("n"))
        .where(RESULTS.c.run_id.in_(ids), RESULTS.c.status == "hung")
        .group_by(RESULTS.c.run_id)
    )
    hung: Counter[str] = Counter()
    for row in runs.conn.execute(query):
        hung[runs.of_run[row.run_id].group] += row.n
    return [RunTime(g, hung[g.group]) for g in groups]
