"""A case over time: its timeline in a cell (since when it fails, when it last passed, how often
it flipped), the flaky cases of a store, and the torch releases a bisect would probe.

The flake rule: a case is flaky only where its behaviour both failed (failed, blocked, crashed,
hung, or failed as its manifest expects) and passed (passed, or passed against its manifest) on
one configuration (torch commit, backend version, device, allocator, cell, the backend's
environment and checkers) within the window (default 30 days back from the newest run asked
about): a case that changed because torch, the backend or a fault switch changed is a change, not
a flake; a manifest edit (failed -> xfailed) changes no behaviour; the suite's own errors and
cases not run are no evidence; evidence older than the window expires.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from packaging.version import InvalidVersion, Version
from sqlalchemy import case, func, select

from conformance.history.runs import BAD, GOOD, RunGroup, Runs, flips
from conformance.history.schema import CASE_NAMES, RESULTS, RUNS

#: how far back flake evidence counts, by default
FLAKE_DAYS = 30
#: the flake rule's evidence: what the device did, whatever the manifest expected
BEHAVED_BADLY = frozenset({"failed", "blocked", "crashed", "hung", "xfailed"})
BEHAVED_WELL = frozenset({"passed", "xpassed"})


@dataclass
class Point:
    """A case in one run (``status`` "absent": the run did not record it)."""

    run: RunGroup
    status: str
    check: str | None = None
    finding: str | None = None
    message: str | None = None


@dataclass
class Timeline:
    """A case in every run of a cell, oldest first."""

    case: str
    cell: str
    points: list[Point]

    @property
    def recorded(self) -> list[Point]:
        return [p for p in self.points if p.status != "absent"]

    def failing_since(self) -> Point | None:
        """The first run of the failing streak the case is in now (runs that did not judge it
        are stepped over), or None when it does not fail in its latest judged run."""
        since = None
        for point in reversed(self.recorded):
            if point.status in GOOD:
                break
            if point.status in BAD:
                since = point
        return since

    def last_passed(self) -> Point | None:
        return next((p for p in reversed(self.recorded) if p.status in GOOD), None)

    def first_failed(self) -> Point | None:
        return next((p for p in self.recorded if p.status in BAD), None)

    def flips(self) -> int:
        """How often the verdict turned between failing and passing (not judged: stepped over)."""
        return flips([p.status in BAD for p in self.recorded if p.status in BAD | GOOD])


@dataclass
class Flake:
    """A case that both failed and passed on one configuration within the window."""

    case: str
    cell: str
    torch: str
    torch_git: str
    backend_version: str
    statuses: list[str] = field(default_factory=list)  # oldest first
    first: str = ""
    last: str = ""

    @property
    def failed(self) -> int:
        return sum(s in BEHAVED_BADLY for s in self.statuses)

    @property
    def passed(self) -> int:
        return sum(s in BEHAVED_WELL for s in self.statuses)

    @property
    def flips(self) -> int:
        evidence = BEHAVED_BADLY | BEHAVED_WELL
        return flips([s in BEHAVED_BADLY for s in self.statuses if s in evidence])

    @property
    def rate(self) -> float:
        """Flips per chance to flip (runs with evidence - 1)."""
        judged = self.failed + self.passed
        return self.flips / (judged - 1) if judged > 1 else 0.0

    def describe(self) -> str:
        """Why it is flaky, in one line (reports, the scorecard, the manifest writer)."""
        return (
            f"flaky: failed {self.failed} and passed {self.passed} of {len(self.statuses)} runs "
            f"on one configuration (flake rate {self.rate:.0%})"
        )


def timeline(runs: Runs, case_id: int, name: str, cell: str) -> Timeline:
    """The case in every run of ``cell``."""
    groups = runs.of_cell(cell)
    query = (
        select(RESULTS.c.run_id, RESULTS.c.status, RESULTS.c.check_name, RESULTS.c.finding,
               RESULTS.c.message)
        .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
        .where(RESULTS.c.case_id == case_id, RUNS.c.cell == cell)
    )  # fmt: skip
    seen = {runs.of_run[row.run_id].group: row for row in runs.conn.execute(query)}
    points = []
    for group in groups:
        row = seen.get(group.group)
        if row is None:
            points.append(Point(group, "absent"))
        else:
            points.append(Point(group, row.status, row.check_name, row.finding, row.message))
    return Timeline(name, cell, points)


def failing_now(runs: Runs, cell: str) -> list[Timeline]:
    """The timeline of every case failing in the cell's latest run, worst streak first."""
    kept = runs.of_cell(cell)
    if not kept:
        return []
    latest = kept[-1]
    query = (
        select(RESULTS.c.case_id, CASE_NAMES.c.name)
        .join(CASE_NAMES, CASE_NAMES.c.id == RESULTS.c.case_id)
        .where(RESULTS.c.run_id.in_(latest.run_ids), RESULTS.c.status.in_(sorted(BAD)))
    )
    lines = [timeline(runs, row.case_id, row.name, cell) for row in runs.conn.execute(query)]
    return sorted(lines, key=lambda t: (_started(t.failing_since()), t.case))


def _started(point: Point | None) -> str:
    return point.run.started if point is not None else ""


def flaky(runs: Runs, cell: str | None = None, days: int = FLAKE_DAYS) -> list[Flake]:
    """The flaky cases (the module's rule), the most flips first."""
    scope = [g for g in runs.groups if cell is None or g.cell == cell]
    if not scope:
        return []
    newest = max(datetime.fromisoformat(g.started) for g in scope)
    cutoff = (newest - timedelta(days=days)).isoformat()
    bad = func.sum(case((RESULTS.c.status.in_(sorted(BEHAVED_BADLY)), 1), else_=0))
    good = func.sum(case((RESULTS.c.status.in_(sorted(BEHAVED_WELL)), 1), else_=0))
    where = [RUNS.c.started >= cutoff] + ([RUNS.c.cell == cell] if cell else [])
    pairs = (
        select(RESULTS.c.case_id, RUNS.c.configuration)
        .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
        .where(*where)
        .group_by(RESULTS.c.case_id, RUNS.c.configuration)
        .having(bad > 0, good > 0)
    )
    flakes = []
    for case_id, configuration in list(runs.conn.execute(pairs)):
        rows = runs.conn.execute(
            select(RESULTS.c.status, RUNS.c.id, CASE_NAMES.c.name)
            .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
            .join(CASE_NAMES, CASE_NAMES.c.id == RESULTS.c.case_id)
            .where(RESULTS.c.case_id == case_id, RUNS.c.configuration == configuration, *where)
            .order_by(RUNS.c.started, RUNS.c.id)
        ).all()
        first = runs.of_run[rows[0].id]
        flake = Flake(rows[0].name, first.cell, first.torch, first.torch_git, first.backend_version)
        flake.statuses = [r.status for r in rows]
        flake.first, flake.last = first.started, runs.of_run[rows[-1].id].started
        flakes.append(flake)
    return sorted(flakes, key=lambda f: (-f.flips, f.case))


@dataclass
class BisectRange:
    """What the store knows of a case per torch release, and the range a bisect would probe."""

    case: str
    by_torch: dict[str, str]  # torch version -> the case's status in its latest run there
    good: str | None
    bad: str | None
    note: str = ""

    def command(self, allocator: str = "") -> str:
        if not (self.good and self.bad):
            return ""
        extra = f" --allocator {allocator}" if allocator else ""
        return (
            f"python -m conformance.bisect '{self.case}' --good {_release(self.good)} "
            f"--bad {_release(self.bad)}{extra}"
        )


def _release(version: str) -> str:
    return version.split("+")[0]


def _version(text: str) -> Version:
    try:
        return Version(_release(text))
    except InvalidVersion:
        return Version("0")


def latest_environment(runs: Runs, case_id: int) -> str | None:
    """The backend environment of the newest run that recorded the case (a bisect compares
    torches under it: a fault switched on elsewhere is not a torch's doing)."""
    query = (
        select(RUNS.c.environment)
        .join(RESULTS, RESULTS.c.run_id == RUNS.c.id)
        .where(RESULTS.c.case_id == case_id)
        .order_by(RUNS.c.started.desc())
        .limit(1)
    )
    return runs.conn.execute(query).scalar()


def bisect_range(
    runs: Runs,
    case_id: int,
    name: str,
    allocator: str | None = None,
    environment: str | None = None,
) -> BisectRange:
    """The newest torch where the case passes below the oldest of the failing torches above
    every pass, from each torch's latest run of the case (of ``allocator`` and the backend
    ``environment``, rows.environment_json, where given)."""
    query = (
        select(RESULTS.c.status, RUNS.c.torch, RUNS.c.started)
        .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
        .where(RESULTS.c.case_id == case_id)
        .order_by(RUNS.c.started, RUNS.c.id)
    )
    if allocator:
        query = query.where(RUNS.c.allocator == allocator)
    if environment is not None:
        query = query.where(RUNS.c.environment == environment)
    by_torch: dict[str, str] = {}
    for row in runs.conn.execute(query):
        by_torch[row.torch] = row.status  # the latest run of each torch wins
    ordered = sorted(by_torch, key=_version)
    judged = [(t, by_torch[t] in BAD) for t in ordered if by_torch[t] in BAD | GOOD]
    result = BisectRange(name, {t: by_torch[t] for t in ordered}, None, None)
    if not judged or not judged[-1][1]:
        result.note = "it does not fail on the newest torch the store has a verdict for"
        return result
    first_bad = len(judged) - 1
    while first_bad > 0 and judged[first_bad - 1][1]:
        first_bad -= 1
    result.bad = judged[first_bad][0]
    if first_bad == 0:
        result.note = "it fails on every torch in the store: bisect needs an older --good release"
        return result
    result.good = judged[first_bad - 1][0]
    if _release(result.good) == _release(result.bad):
        result.note = "the same release on both sides: the change is between two builds of it"
    return result
