"""A one-page scorecard a backend repository can publish: Markdown and an SVG badge.

    python -m conformance.report results/ --scorecard site/      # site/scorecard.md, badge.svg

What it says, over every run given (sessions: torch versions, allocator modes): how many of the
overloads the backend registered were tested, how much of what the representative models need
of it (run.json `coverage.models`) was covered, cases by status, findings (one per root cause,
`conformance/findings.py`) by manifest category with the repro of each, the known ones the
manifest expects, the grid of ops x dtypes the device lacks (`unsupported`: declared, or failing
because undeclared), the torch versions and allocator modes run, and the first torch version
where a finding fails when the runs span several versions or a bisect result names one of its
cases. Rendered with jinja2 from `templates/scorecard.md.j2` and `templates/badge.svg.j2`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import jinja2
from packaging.version import InvalidVersion, Version

from conformance.findings import Finding, category_of, group_findings
from conformance.record import FAILING, STATUS_ORDER, CaseId, CaseRecord
from conformance.report.html import TEMPLATE_DIR
from conformance.report.load import Run
from conformance.report.summary import ordered
from conformance.report.trends import Trends

__all__ = ["Scorecard", "build_scorecard", "render_badge", "render_scorecard", "write_scorecard"]

GRID_OPS = 60  # rows of the unsupported grid; the rest are counted
_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32")
_DTYPES += ("float64", "complex64", "complex128")


@dataclass
class Row:
    """One root cause on the scorecard."""

    finding: Finding
    category: str
    sessions: list[str]
    first_bad: str = ""  # the first torch version where it fails, if known
    link: str = ""  # the finding in the HTML report

    @property
    def ops(self) -> str:
        return ", ".join(self.finding.ops)

    @property
    def repro(self) -> str:
        return self.finding.representative.repro.replace("`", "'")


@dataclass
class Scorecard:
    """Everything the page and the badge show."""

    backends: list[str]
    sessions: list[Run]
    statuses: Counter[str]
    registered: tuple[int, int]  # (tested, registered), the widest session
    models: tuple[int, int]  # (covered, needed)
    new: list[Row]  # failing: not expected by the manifest
    known: list[Row]  # expected by the manifest (xfailed)
    unsupported: dict[str, dict[str, str]]  # op -> dtype -> "declared" | "failing"
    torch_versions: list[str]
    allocators: list[str]
    # "session: reason" for sessions that do not account for every case (report/load.py)
    incomplete: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def by_category(self) -> list[tuple[str, int, int, int, int]]:
        """(category, new findings, their cases, known findings, their cases)."""
        out: dict[str, list[int]] = {}
        for rows, i in ((self.new, 0), (self.known, 2)):
            for row in rows:
                counts = out.setdefault(row.category, [0, 0, 0, 0])
                counts[i] += 1
                counts[i + 1] += row.finding.count
        return [(c, *v) for c, v in sorted(out.items())]

    @property
    def grid_dtypes(self) -> list[str]:
        return ordered((d for cells in self.unsupported.values() for d in cells), _DTYPES)

    @property
    def badge(self) -> tuple[str, str]:
        """(text, colour) of the badge's right half."""
        if self.incomplete or self.statuses.get("not-run"):
            return "incomplete run", "#dfb317"
        if self.new:
            n = len(self.new)
            return f"{n} finding{'s' if n != 1 else ''}", "#e05d44"
        tested, registered = self.registered
        return f"passing, {tested}/{registered} ops", "#4c1"


def _version(text: str) -> Version | None:
    try:
        return Version(text.split("+")[0])
    except InvalidVersion:
        return None


def _first_bad(finding: Finding, versions: list[Version], bisected: Mapping[str, str]) -> str:
    """A bisect answer for one of its cases, else the oldest torch it fails in ("or earlier"
    when that is the oldest version run; nothing when only one version ran)."""
    for case in finding.cases:
        try:
            answer = bisected.get(str(CaseId.parse(case.id)))
        except ValueError:
            answer = None
        if answer:
            return f"{answer} (bisect)"
    if len(versions) < 2:
        return ""
    found = [v for c in finding.cases if (v := _version(c.torch)) is not None]
    if not found:
        return ""
    first = min(found)
    return f"{first} or earlier" if first == versions[0] else str(first)


def _rows(
    records: list[CaseRecord],
    statuses: frozenset[str],
    versions: list[Version],
    bisected: Mapping[str, str],
    report: str,
) -> list[Row]:
    out = []
    for finding in group_findings(records, statuses):
        sessions = sorted({str(c.extra.get("_session")) for c in finding.cases})
        category = Counter(category_of(c) for c in finding.cases).most_common(1)[0][0]
        link = f"{report}#{finding.id}" if report else ""
        out.append(Row(finding, category, sessions, _first_bad(finding, versions, bisected), link))
    return out


def _unsupported(records: list[CaseRecord]) -> dict[str, dict[str, str]]:
    grid: dict[str, dict[str, str]] = {}
    for r in records:
        failing = r.check == "unsupported" and r.status in FAILING
        if r.status != "unsupported" and not failing:
            continue
        op = r.op or "?"
        if r.overload and r.overload != "default":
            op += f".{r.overload}"
        cells = grid.setdefault(op, {})
        dtype = r.dtype or "-"
        cells[dtype] = "failing" if failing or cells.get(dtype) == "failing" else "declared"
    return dict(sorted(grid.items()))


def _bisected(paths: Sequence[str]) -> dict[str, str]:
    """{case id: first bad torch} from `python -m conformance.bisect --json` results."""
    out = {}
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        try:
            case = str(CaseId.parse(str(data.get("expression", ""))))
        except ValueError:
            continue  # a -k expression: not one case
        out[case] = str(data.get("answer") or data.get("first_bad") or "")
    return out


def build_scorecard(runs: Sequence[Run], *, bisect: Sequence[str] = (), report: str = ""):
    """The scorecard of `runs`; `bisect`: bisect JSON files; `report`: the HTML report's path
    relative to the scorecard (findings link to it)."""
    records = [
        replace(case, torch=case.torch or run.torch, extra={**case.extra, "_session": run.name})
        for run in runs
        for case in run.cases
    ]
    versions = sorted({v for run in runs if (v := _version(run.torch)) is not None})
    bisected = _bisected(bisect)
    widest = max(runs, key=lambda r: len((r.meta.get("coverage") or {}).get("registered", [])))
    cov = widest.meta.get("coverage") or {}
    tested = set(cov.get("tested", [])) | set(cov.get("fallback_tested", []))
    models = set(cov.get("models", []))
    return Scorecard(
        backends=sorted({run.backend for run in runs}),
        sessions=list(runs),
        statuses=Counter(str(r.status) for r in records),
        registered=(len(cov.get("tested", [])), len(cov.get("registered", []))),
        models=(len(models & tested), len(models)),
        new=_rows(records, FAILING, versions, bisected, report),
        known=_rows(records, frozenset({"xfailed"}), versions, bisected, ""),  # not in report
        unsupported=_unsupported(records),
        torch_versions=[str(v) for v in versions] or sorted({run.torch for run in runs}),
        allocators=sorted({run.allocator for run in runs}),
        incomplete=[f"{run.name}: {reason}" for run in runs for reason in run.incomplete],
    )


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=jinja2.select_autoescape(["svg.j2"], default_for_string=False),
    )
    env.filters["cell"] = _cell
    env.filters["pct"] = lambda pair: f"{100 * pair[0] / pair[1]:.0f}%" if pair[1] else "-"
    env.globals["statuses"] = [s.value for s in STATUS_ORDER]
    env.globals["grid_ops"] = GRID_OPS
    return env


def _cell(text: object, limit: int = 200, code: bool = False) -> str:
    """One Markdown table cell: one line, pipes escaped, shortened; outside a code span `<`
    escaped too ("<op>" of a finding's title is no HTML tag)."""
    value = " ".join(str(text or "").split())
    value = value if len(value) <= limit else value[: limit - 1] + "…"
    value = value.replace("|", "\\|")
    return value if code else value.replace("<", "&lt;").replace(">", "&gt;")


def render_scorecard(card: Scorecard, generated: str = "", trends: Trends | None = None) -> str:
    """The Markdown page (``trends``: the store's pictures, linked from trends/, and flaky
    cases, counted per finding)."""
    trends = trends or Trends(Path())
    flaky = {case for cases in trends.flaky.values() for case in cases}
    template = _environment().get_template("scorecard.md.j2")
    return template.render(
        card=card,
        generated=generated,
        trends=trends,
        flaky=lambda finding: sum(c.id in flaky for c in finding.cases),
    )


def render_badge(card: Scorecard, label: str = "conformance") -> str:
    """A shields-style SVG badge: `conformance | 3 findings` (red), `passing, 67/69 ops`
    (green) or `incomplete run` (yellow). Widths from a 7 px average glyph of 11 px Verdana."""
    text, colour = card.badge
    left, right = 10 + 7 * len(label), 10 + 7 * len(text)
    template = _environment().get_template("badge.svg.j2")
    return template.render(label=label, text=text, colour=colour, left=left, right=right)


def write_scorecard(
    runs: Sequence[Run], directory: str | Path, *, bisect: Sequence[str] = (), report: str = "",
    generated: str = "", trends: Trends | None = None,
) -> list[Path]:  # fmt: skip
    """Write DIR/scorecard.md and DIR/badge.svg (and the store's trend pictures into
    DIR/trends/, linked from the page); returns their paths."""
    card = build_scorecard(runs, bisect=bisect, report=report)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    page, badge = folder / "scorecard.md", folder / "badge.svg"
    pictures = trends.copy_pictures(folder / "trends") if trends else []
    page.write_text(render_scorecard(card, generated, trends), encoding="utf-8")
    badge.write_text(render_badge(card), encoding="utf-8")
    return [page, badge, *pictures]
