"""The op x torch-version grid over the runs of several torch releases, and what changed in it.

Runs (:func:`conformance.report.load.load_results`) are keyed by their torch version (public part:
``2.8.0+cu128`` is ``2.8.0``) and their *variant*: what follows ``conformance-<minor>`` in the run's
folder name (``""`` for the plain cell, ``-guard``, ``-asan``); one variant is gridded at a time so
that a sanitizer cell is not mistaken for a torch change. For every case whose status changes
across versions the grid names the first version where it changed (regression or fix), from the
data alone, without installing anything; against a previous nightly's grid it lists new failures
and new passes (`compare_previous`). The failing records of every version are grouped by root
cause (`version_findings`: :mod:`conformance.findings`' keys), each with the first and last
version where it fails. `versions.py` renders it all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from conformance.findings import CrashSites, Finding, FindingKey, crash_sites, finding_key
from conformance.record import CaseRecord, Status
from conformance.report.load import FAILING, Run, worst_status

__all__ = [
    "MISSING",
    "Change",
    "Comparison",
    "VersionFinding",
    "VersionGrid",
    "build_version_grid",
    "case_count",
    "compare_previous",
    "run_variant",
    "run_version",
    "version_findings",
]

_SESSION_RE = re.compile(r"^conformance-\d+\.\d+(?P<variant>.*)$")
MISSING = "-"


def run_version(run: Run) -> Version | None:
    """The public torch version of ``run`` (``2.8.0+cu128`` -> ``2.8.0``), None if unknown."""
    try:
        return Version(Version(run.torch).public)
    except InvalidVersion:
        return None


def run_variant(run: Run) -> str:
    """``""`` for ``conformance-2.8``, ``-guard`` for ``conformance-2.8-guard``; else ``""``."""
    match = _SESSION_RE.match(run.name)
    return match.group("variant") if match else ""


@dataclass(frozen=True)
class Change:
    """A status change of one case between two consecutive versions that ran it."""

    case: str
    version: str
    before: str
    after: str

    @property
    def kind(self) -> str:
        """``regression`` (now failing), ``fix`` (no longer failing) or ``change``."""
        if self.after in FAILING and self.before not in FAILING:
            return "regression"
        if self.before in FAILING and self.after not in FAILING:
            return "fix"
        return "change"


@dataclass
class VersionGrid:
    """Status per (case id, version) and per (op, version), versions oldest first."""

    versions: list[Version]
    cases: dict[str, dict[Version, str]] = field(default_factory=dict)
    ops: dict[str, dict[Version, str]] = field(default_factory=dict)
    runs: dict[Version, list[str]] = field(default_factory=dict)
    #: The result record (a cases-*.jsonl line) behind each (case id, version) status.
    records: dict[tuple[str, Version], CaseRecord] = field(default_factory=dict)

    def record(self, case: str, version: Version) -> CaseRecord | None:
        """The record of ``case`` on ``version`` (None when it did not run there)."""
        return self.records.get((case, version))

    def crash_sites(self) -> dict[Version, CrashSites]:
        """Where each version's own crashes died (finding_keys.crash_sites: keys are per run)."""
        failing: dict[Version, list[CaseRecord]] = {}
        for (_, version), record in self.records.items():
            if record.status in FAILING:
                failing.setdefault(version, []).append(record)
        return {version: crash_sites(records) for version, records in failing.items()}

    def status(self, case: str, version: Version) -> str:
        """The case's status on ``version`` (``-`` when it did not run there)."""
        return self.cases.get(case, {}).get(version, MISSING)

    def changes(self, case: str) -> list[Change]:
        """Every status change of ``case`` along the versions (versions where it did not run are
        skipped)."""
        out: list[Change] = []
        previous: str | None = None
        for version in self.versions:
            status = self.status(case, version)
            if status == MISSING:
                continue
            if previous is not None and status != previous:
                out.append(Change(case, str(version), previous, status))
            previous = status
        return out

    def first_changes(self) -> list[Change]:
        """For each case whose status differs across versions, its first change (by case id)."""
        firsts = []
        for case in sorted(self.cases):
            changes = self.changes(case)
            if changes:
                firsts.append(changes[0])
        return firsts

    def counts(self, version: Version) -> dict[str, int]:
        """Number of cases per status on ``version``."""
        out: dict[str, int] = {}
        for statuses in self.cases.values():
            status = statuses.get(version)
            if status:
                out[status] = out.get(status, 0) + 1
        return out


def build_version_grid(runs: Iterable[Run], variant: str = "") -> VersionGrid:
    """The grid over ``runs`` of ``variant``; runs sharing a version merge (worst status wins)."""
    grid = VersionGrid(versions=[])
    op_of: dict[str, str] = {}
    for run in runs:
        version = run_version(run)
        if version is None or run_variant(run) != variant:
            continue
        grid.runs.setdefault(version, []).append(run.name)
        for case in run.cases:
            op_of[case.id] = case.op_name
            row = grid.cases.setdefault(case.id, {})
            old = row.get(version)
            row[version] = case.status if old is None else worst_status([old, case.status])
            if row[version] == case.status:
                grid.records[(case.id, version)] = case
    grid.versions = sorted(grid.runs)
    for case, row in grid.cases.items():
        op_row = grid.ops.setdefault(op_of[case], {})
        for version, status in row.items():
            old = op_row.get(version)
            op_row[version] = status if old is None else worst_status([old, status])
    return grid


def case_count(n: int) -> str:
    """``1 case``, ``3 cases``."""
    return f"{n} case" + ("" if n == 1 else "s")


@dataclass
class VersionFinding:
    """One finding (root cause) across the versions of a grid."""

    finding: Finding
    #: Case ids of the finding per version (versions where it has none are absent).
    cases_by_version: dict[Version, list[str]]
    versions: list[Version]
    #: Per version, the cases that joined the finding there after running without failing in the
    #: previous version that ran them: the regressions the finding stands for.
    regressions: dict[Version, list[str]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``regression`` (some cases passed in an older version), ``oldest`` (failing since the
        oldest version) or ``new cases`` (its cases did not run before)."""
        if self.regressions:
            return "regression"
        return "oldest" if self.versions and self.first == self.versions[0] else "new cases"

    @property
    def first(self) -> Version:
        """The first version where the finding fails."""
        return min(self.cases_by_version)

    @property
    def last(self) -> Version:
        """The last version where the finding fails."""
        return max(self.cases_by_version)

    @property
    def fixed_in(self) -> Version | None:
        """The version after :attr:`last` if the finding is gone by the newest version."""
        later = [v for v in self.versions if v > self.last]
        return later[0] if later else None

    @property
    def count(self) -> int:
        """Distinct cases over all versions."""
        return self.finding.count

    def headline(self) -> str:
        """``first fails in 2.10.0 (312 cases)``; later regressions and the fix, if any."""
        n = len(self.cases_by_version[self.first])
        if self.versions and self.first == self.versions[0]:
            text = f"fails since the oldest version {self.first} ({case_count(n)})"
        else:
            text = f"first fails in {self.first} ({case_count(n)})"
        later = [(v, ids) for v, ids in self.regressions.items() if v != self.first]
        if later:
            text += "; new failures in " + ", ".join(f"{v} (+{len(ids)})" for v, ids in later)
        if self.fixed_in is not None:
            text += f"; gone in {self.fixed_in}"
        return text


def version_findings(grid: VersionGrid) -> list[VersionFinding]:
    """The findings over every version of ``grid``: regressions first (by the version of their
    first regression), then the rest by first version; larger first."""
    groups: dict[FindingKey, dict[Version, list[str]]] = {}
    records: dict[FindingKey, dict[str, CaseRecord]] = {}
    sites = grid.crash_sites()
    for (case, version), record in sorted(grid.records.items(), key=lambda kv: kv[0][1]):
        if record.status not in FAILING:
            continue
        key = finding_key(record, sites[version])
        groups.setdefault(key, {}).setdefault(version, []).append(case)
        records.setdefault(key, {}).setdefault(case, record)
    out = []
    for key, by_version in groups.items():
        regressions: dict[Version, list[str]] = {}
        for version, ids in sorted(by_version.items()):
            ids.sort()
            for case in ids:
                earlier = [grid.status(case, v) for v in grid.versions if v < version]
                earlier = [st for st in earlier if st != MISSING]
                if earlier and earlier[-1] not in FAILING:
                    regressions.setdefault(version, []).append(case)
        finding = Finding(key, list(records[key].values()))
        out.append(
            VersionFinding(finding, dict(sorted(by_version.items())), grid.versions, regressions)
        )
    rank = {"regression": 0, "new cases": 1, "oldest": 2}
    out.sort(
        key=lambda f: (
            rank[f.kind],
            min(f.regressions) if f.regressions else f.first,
            -f.count,
            f.finding.title,
        )
    )
    return out


@dataclass
class Comparison:
    """Cases that changed since a previous nightly: (case, version, before, after) each, and the
    same rows grouped by finding (:attr:`failure_groups`, :attr:`pass_groups`)."""

    new_failures: list[tuple[str, str, str, str]] = field(default_factory=list)
    new_passes: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: (finding id, finding title, rows): new failures by their finding now ...
    failure_groups: list[tuple[str, str, list[tuple[str, str, str, str]]]] = field(
        default_factory=list
    )
    #: ... and new passes by the finding they had in the previous nightly.
    pass_groups: list[tuple[str, str, list[tuple[str, str, str, str]]]] = field(
        default_factory=list
    )


def _group_rows(
    rows: list[tuple[str, str, str, str]], grid: VersionGrid
) -> list[tuple[str, str, list[tuple[str, str, str, str]]]]:
    groups: dict[FindingKey, list[tuple[str, str, str, str]]] = {}
    records: dict[FindingKey, list[CaseRecord]] = {}
    sites = grid.crash_sites()
    for row in rows:
        record = grid.record(row[0], Version(row[1])) or CaseRecord(row[0], Status.FAILED)
        key = finding_key(record, sites.get(Version(row[1])))
        groups.setdefault(key, []).append(row)
        records.setdefault(key, []).append(record)
    out = [(Finding(k, records[k]), v) for k, v in groups.items()]
    out.sort(key=lambda fv: (-len(fv[1]), fv[0].title))
    return [(f.id, f.title, v) for f, v in out]


def compare_previous(current: VersionGrid, previous: VersionGrid) -> Comparison:
    """New failures (failing now, not before) and new passes (failing before, passing now)."""
    result = Comparison()
    for case in sorted(current.cases):
        for version in current.versions:
            now, before = current.status(case, version), previous.status(case, version)
            if before == MISSING or now == MISSING:
                continue
            row = (case, str(version), before, now)
            if now in FAILING and before not in FAILING:
                result.new_failures.append(row)
            elif before in FAILING and now not in FAILING:
                result.new_passes.append(row)
    result.failure_groups = _group_rows(result.new_failures, current)
    result.pass_groups = _group_rows(result.new_passes, previous)
    return result
