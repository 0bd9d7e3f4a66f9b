"""The nightly version report: an op x torch-version grid over the runs of several torch releases.

Runs (:func:`conformance.report.load.load_results`) are keyed by their torch version (public part:
``2.8.0+cu128`` is ``2.8.0``) and their *variant*: what follows ``conformance-<minor>`` in the run's
folder name (``""`` for the plain cell, ``-guard``, ``-asan``); one variant is reported at a time so
that a sanitizer cell is not mistaken for a torch change. For every case whose status changes
across versions the report names the first version where it changed (regression or fix), from the
data alone, without installing anything; with a previous nightly's results it lists new failures
and new passes. Output: Markdown (for a CI step summary) and HTML with an embedded heatmap PNG.

The report leads with *findings* (:mod:`conformance.findings`): failing cases grouped by root cause
(check + normalised message + crash signature), each with the first and last version where it
fails and its cases per version, so one regression is one row ("finding X first fails in 2.10
(312 cases)") with its cases folded underneath.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from conformance.findings import Finding, FindingKey, finding_key
from conformance.report.load import FAILING, STATUSES, Run, worst_status

__all__ = [
    "Change",
    "VersionFinding",
    "VersionGrid",
    "build_version_grid",
    "compare_previous",
    "render_versions_html",
    "render_versions_markdown",
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
    records: dict[tuple[str, Version], dict[str, Any]] = field(default_factory=dict)

    def record(self, case: str, version: Version) -> dict[str, Any]:
        """The record of ``case`` on ``version`` (empty when it did not run there)."""
        return self.records.get((case, version), {})

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
                grid.records[(case.id, version)] = case.to_json()
    grid.versions = sorted(grid.runs)
    for case, row in grid.cases.items():
        op_row = grid.ops.setdefault(op_of[case], {})
        for version, status in row.items():
            old = op_row.get(version)
            op_row[version] = status if old is None else worst_status([old, status])
    return grid


def _cases(n: int) -> str:
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
            text = f"fails since the oldest version {self.first} ({_cases(n)})"
        else:
            text = f"first fails in {self.first} ({_cases(n)})"
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
    records: dict[FindingKey, dict[str, dict[str, Any]]] = {}
    for (case, version), record in sorted(grid.records.items(), key=lambda kv: kv[0][1]):
        if record.get("status") not in FAILING:
            continue
        key = finding_key(record)
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
    records: dict[FindingKey, list[dict[str, Any]]] = {}
    for row in rows:
        record = grid.record(row[0], Version(row[1])) or {"id": row[0], "status": "failed"}
        key = finding_key(record)
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


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _finding_details_md(vf: VersionFinding, grid: VersionGrid, max_rows: int) -> list[str]:
    """A folded block per finding: its representative and its cases with status per version."""
    rep = vf.finding.representative
    cases = sorted({c for ids in vf.cases_by_version.values() for c in ids})
    lines = [
        f"<details><summary><code>{vf.finding.id}</code> {html.escape(vf.finding.title)}: "
        f"{_cases(len(cases))}, {html.escape(vf.headline())}</summary>",
        "",
        f"- representative: `{_md_escape(_text(rep.get('id')))}`: "
        f"{_md_escape(_text(rep.get('message')).splitlines()[0] if rep.get('message') else '')}",
        f"- ops: {', '.join(f'`{op}`' for op in vf.finding.ops[:30])}"
        + (f" and {len(vf.finding.ops) - 30} more" if len(vf.finding.ops) > 30 else ""),
        "",
        "| case | " + " | ".join(str(v) for v in grid.versions) + " |",
        "|---" * (len(grid.versions) + 1) + "|",
    ]
    for case in cases[:max_rows]:
        lines.append(
            f"| `{_md_escape(case)}` | "
            + " | ".join(grid.status(case, v) for v in grid.versions)
            + " |"
        )
    if len(cases) > max_rows:
        lines.append(f"| ... {len(cases) - max_rows} more (all in the HTML report) |")
    return [*lines, "", "</details>"]


def render_versions_markdown(
    grid: VersionGrid,
    comparison: Comparison | None = None,
    *,
    title: str = "Torch version report",
    max_rows: int = 100,
) -> str:
    """Markdown: counts per version, first changes, changes since the previous nightly, and the op
    grid (ops whose status changes first, then all in a collapsed block)."""
    versions = grid.versions
    head = "| | " + " | ".join(str(v) for v in versions) + " |"
    rule = "|---" * (len(versions) + 1) + "|"
    lines = [f"## {title}", ""]
    if not versions:
        return "\n".join([*lines, "No runs with a torch version.", ""])
    lines += ["### Cases per status", "", head, rule]
    for status in STATUSES:
        cells = [str(grid.counts(v).get(status, 0)) for v in versions]
        if any(c != "0" for c in cells):
            lines.append(f"| {status} | " + " | ".join(cells) + " |")
    findings = version_findings(grid)
    lines += ["", f"### Findings across versions: {len(findings)}", ""]
    if findings:
        lines += [
            "Failing cases grouped by root cause (check + message with numbers, shapes, dtypes "
            "and names masked + crash signature).",
            "",
            "| finding | when | " + " | ".join(str(v) for v in versions) + " | repro |",
            "|---|---|" + "---|" * len(versions) + "---|",
        ]
        for vf in findings[:max_rows]:
            counts = [str(len(vf.cases_by_version.get(v, []))) for v in versions]
            repro = _text(vf.finding.representative.get("repro"))
            lines.append(
                f"| `{vf.finding.id}` {_md_escape(vf.finding.title)} | **{vf.headline()}** | "
                + " | ".join(counts)
                + f" | {'`' + _md_escape(repro) + '`' if repro else ''} |"
            )
        if len(findings) > max_rows:
            lines.append(f"| ... {len(findings) - max_rows} more | |" + " |" * len(versions) + " |")
        for vf in findings[:max_rows]:
            lines += ["", *_finding_details_md(vf, grid, max_rows)]
    else:
        lines.append("None: no case fails on any version.")
    firsts = grid.first_changes()
    lines += [
        "",
        f"<details><summary>Cases whose status changes across versions: {len(firsts)}</summary>",
        "",
    ]
    if firsts:
        lines += ["| case | first changed in | kind | from | to |", "|---|---|---|---|---|"]
        for ch in firsts[:max_rows]:
            lines.append(
                f"| `{_md_escape(ch.case)}` | **{ch.version}** | {ch.kind} | {ch.before} | "
                f"{ch.after} |"
            )
        if len(firsts) > max_rows:
            lines.append(f"| ... {len(firsts) - max_rows} more | | | | |")
    else:
        lines.append("None: every case has the same status on every version.")
    lines += ["", "</details>"]
    if comparison is not None:
        for name, rows, groups in (
            (
                "New failures since the previous nightly",
                comparison.new_failures,
                comparison.failure_groups,
            ),
            (
                "New passes since the previous nightly",
                comparison.new_passes,
                comparison.pass_groups,
            ),
        ):
            lines += ["", f"### {name}: {len(rows)} in {len(groups)} findings", ""]
            for fid, ftitle, group in groups[:max_rows]:
                lines += [
                    f"<details><summary><code>{fid}</code> {html.escape(ftitle)}: "
                    f"{_cases(len(group))}</summary>",
                    "",
                    "| case | torch | before | now |",
                    "|---|---|---|---|",
                ]
                for case, version, before, now in group[:max_rows]:
                    lines.append(f"| `{_md_escape(case)}` | {version} | {before} | {now} |")
                lines += ["", "</details>", ""]
    changing = [op for op in sorted(grid.ops) if len(set(grid.ops[op].values())) > 1]

    def op_rows(ops: Sequence[str]) -> list[str]:
        return [
            f"| `{_md_escape(op)}` | "
            + " | ".join(grid.ops[op].get(v, MISSING) for v in versions)
            + " |"
            for op in ops
        ]

    lines += ["", f"### Ops whose status differs across versions: {len(changing)}", ""]
    if changing:
        lines += [head.replace("| |", "| op |", 1), rule, *op_rows(changing[:max_rows])]
    lines += ["", "<details><summary>Op x torch-version grid (worst status per op)</summary>", ""]
    lines += [head.replace("| |", "| op |", 1), rule, *op_rows(sorted(grid.ops)), "", "</details>"]
    return "\n".join(lines) + "\n"


_COLOURS = {
    "crashed": "#7f0000",
    "hung": "#8a3b12",
    "error": "#b30000",
    "not-run": "#3c3c3c",
    "failed": "#e34a33",
    "blocked": "#f0a08c",
    "xpassed": "#fc8d59",
    "xfailed": "#fdd49e",
    "unsupported": "#7d8fa8",
    "torch-bug": "#9b6fd0",
    "passed": "#41ab5d",
    "skipped": "#bdbdbd",
    MISSING: "#ffffff",
}


def heatmap_png(grid: VersionGrid, max_ops: int = 400) -> bytes:
    """A PNG heatmap of the op x version grid (changing ops first), made with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    keys = [*STATUSES, MISSING]
    index = {s: i for i, s in enumerate(keys)}
    ops = sorted(grid.ops, key=lambda op: (len(set(grid.ops[op].values())) == 1, op))[:max_ops]
    data = [[index.get(grid.ops[op].get(v, MISSING), 0) for v in grid.versions] for op in ops]
    if not data:
        data, ops = [[len(keys) - 1] * max(len(grid.versions), 1)], ["(no cases)"]
    height = min(2 + 0.18 * len(ops), 60)
    fig, ax = plt.subplots(figsize=(2 + 0.7 * max(len(grid.versions), 1), height))
    cmap = ListedColormap([_COLOURS[k] for k in keys])
    ax.imshow(
        data, aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(keys) - 0.5, interpolation="nearest"
    )
    ax.set_xticks(range(len(grid.versions)), [str(v) for v in grid.versions], rotation=45)
    ax.set_yticks(range(len(ops)), ops, fontsize=6)
    ax.set_xlabel("torch")
    used = sorted(
        {grid.ops[op].get(v, MISSING) for op in grid.ops for v in grid.versions},
        key=lambda s: index.get(s, 0),
    )
    ax.legend(
        handles=[Patch(color=_COLOURS[s], label="not run" if s == MISSING else s) for s in used],
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=7,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def render_versions_html(
    grid: VersionGrid,
    comparison: Comparison | None = None,
    *,
    title: str = "Torch version report",
    generated: str = "",
) -> str:
    """A self-contained HTML page: the heatmap (base64 PNG), first changes and the op grid."""
    esc = html.escape
    try:
        png = base64.b64encode(heatmap_png(grid)).decode("ascii")
        image = f"<img alt='op x torch-version heatmap' src='data:image/png;base64,{png}'>"
    except ImportError:  # matplotlib is a dev extra: the tables still work without it
        image = "<p>(no heatmap: pip install matplotlib)</p>"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title><style>body{{font-family:sans-serif}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "font-size:12px}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f"<p>{esc(generated)}</p>" if generated else "",
        image,
    ]
    findings = version_findings(grid)
    heads = "".join(f"<th>{esc(str(v))}</th>" for v in grid.versions)
    parts += [
        f"<h2>Findings across versions: {len(findings)}</h2>",
        "<p>Failing cases grouped by root cause; click a finding for its cases.</p>",
        f"<table><tr><th>finding</th><th>when</th>{heads}</tr>",
    ]
    for vf in findings:
        counts = "".join(
            f"<td>{len(vf.cases_by_version.get(v, [])) or ''}</td>" for v in grid.versions
        )
        parts.append(
            f"<tr><td><a href='#{vf.finding.id}'><code>{vf.finding.id}</code></a> "
            f"{esc(vf.finding.title)}</td><td><b>{esc(vf.headline())}</b></td>{counts}</tr>"
        )
    parts.append("</table>")
    for vf in findings:
        rep = vf.finding.representative
        cases = sorted({c for ids in vf.cases_by_version.values() for c in ids})
        parts += [
            f"<details id='{vf.finding.id}'><summary><code>{vf.finding.id}</code> "
            f"{esc(vf.finding.title)}: {_cases(len(cases))}, {esc(vf.headline())}</summary>",
            f"<p>representative <code>{esc(_text(rep.get('id')))}</code>: "
            f"{esc(_text(rep.get('message')))}<br>repro: <code>{esc(_text(rep.get('repro')))}"
            f"</code></p><p>ops: {esc(', '.join(vf.finding.ops))}</p>",
            f"<table><tr><th>case</th>{heads}</tr>",
        ]
        for case in cases:
            cells = "".join(
                f"<td style='background:{_COLOURS.get(st, '#fff')}'>{esc(st)}</td>"
                for st in (grid.status(case, v) for v in grid.versions)
            )
            parts.append(f"<tr><td>{esc(case)}</td>{cells}</tr>")
        parts.append("</table></details>")
    parts += [
        "<h2>First version where a case changed</h2><table>",
        "<tr><th>case</th><th>first changed in</th><th>kind</th><th>from</th><th>to</th></tr>",
    ]
    for ch in grid.first_changes():
        parts.append(
            f"<tr><td>{esc(ch.case)}</td><td><b>{esc(ch.version)}</b></td><td>{ch.kind}</td>"
            f"<td>{esc(ch.before)}</td><td>{esc(ch.after)}</td></tr>"
        )
    parts.append("</table>")
    if comparison is not None:
        for name, rows in (
            ("New failures since the previous nightly", comparison.new_failures),
            ("New passes since the previous nightly", comparison.new_passes),
        ):
            parts.append(f"<h2>{name}: {len(rows)}</h2><table>")
            parts += ["<tr>" + "".join(f"<td>{esc(x)}</td>" for x in row) + "</tr>" for row in rows]
            parts.append("</table>")
    parts.append("<h2>Op x torch-version grid</h2><table><tr><th>op</th>")
    parts += [f"<th>{esc(str(v))}</th>" for v in grid.versions]
    parts.append("</tr>")
    for op in sorted(grid.ops):
        cells = "".join(
            f"<td style='background:{_COLOURS.get(s, '#fff')}'>{esc(s)}</td>"
            for s in (grid.ops[op].get(v, MISSING) for v in grid.versions)
        )
        parts.append(f"<tr><td>{esc(op)}</td>{cells}</tr>")
    parts.append("</table></body></html>\n")
    return "\n".join(parts)
