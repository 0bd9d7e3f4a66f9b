"""Static HTML report: the op x dtype x layout grid per session, filters and the failure list.

Rendered with jinja2 from ``templates/report.html.j2``; the page is self-contained (inline CSS and
plain inline JavaScript, no CDN) so it opens from disk or a CI artifact without network access.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from conformance.report.load import STATUSES, Case, Run
from conformance.report.summary import (
    Grid,
    GridCell,
    build_grid,
    family_rows,
    family_tables,
    ordered,
)
from conformance.report.trends import Trends

__all__ = ["TEMPLATE_DIR", "render_html"]

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
#: Cells with these statuses carry no detail payload (the tooltip says it all); keeps pages small.
QUIET: frozenset[str] = frozenset({"passed", "skipped"})


@dataclass(frozen=True)
class _RunView:
    name: str
    label: str
    torch: str
    allocator: str
    backend: str
    finished: bool
    counts: Counter[str]
    total: int
    warnings: list[str]
    grid: Grid


@dataclass(frozen=True)
class _Failure:
    session: str
    case: Case


def _cases_json(cell: GridCell) -> str:
    return json.dumps(
        [
            {
                "path": c.path,
                "status": c.status,
                "check": c.check,
                "message": c.message,
                "repro": c.repro,
            }
            for c in cell.cases
        ],
        ensure_ascii=False,
    )


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["cases_json"] = _cases_json
    return env


def render_html(
    runs: Sequence[Run],
    *,
    title: str = "Conformance report",
    generated: str = "",
    trends: Trends | None = None,
) -> str:
    """The HTML page for ``runs`` (one grid section per run, in the given order); ``trends``:
    the results store's pictures (a section) and flaky cases (marked where they fail)."""
    views = []
    for run in runs:
        counts = run.counts()
        views.append(
            _RunView(
                name=run.name,
                label=run.label,
                torch=run.torch,
                allocator=run.allocator,
                backend=run.backend,
                finished=run.finished,
                counts=counts,
                total=sum(counts.values()),
                warnings=list(run.warnings),
                grid=build_grid(run),
            )
        )
    failures = [_Failure(run.name, case) for run in runs for case in run.failures()]
    findings = [(run.name, run.label, run.findings(), run.unsupported_by_op()) for run in runs]
    families = {f: [(run.name, c) for run, c in rows] for f, rows in family_rows(runs).items()}
    tables = {
        f: (columns, [(run.name, row) for run, row in rows])
        for f, (columns, rows) in family_tables(runs).items()
    }
    template = _environment().get_template("report.html.j2")
    return template.render(
        title=title,
        generated=generated,
        runs=views,
        statuses=STATUSES,
        quiet=QUIET,
        dtypes=ordered((d for v in views for d in v.grid.dtypes), _first(views, "dtypes")),
        layouts=ordered((x for v in views for x in v.grid.layouts), _first(views, "layouts")),
        failures=failures,
        tables=tables,
        findings=findings,
        families=families,
        total_cases=sum(v.total for v in views),
        trends=trends or Trends(Path()),
    )


def _first(views: Sequence[_RunView], attr: str) -> tuple[str, ...]:
    """The order of the first grid's dtypes/layouts (keeps the canonical order in filters)."""
    seen: list[str] = []
    for view in views:
        for value in getattr(view.grid, attr):
            if value not in seen:
                seen.append(value)
    return tuple(seen)
