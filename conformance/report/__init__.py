"""Reports over conformance results folders: a Markdown summary, a static HTML grid, the
torch-version report and the scorecard (scorecard.md + badge.svg).

``python -m conformance.report RESULTS_DIR... --markdown out.md --html out.html --scorecard DIR``;
see ``__main__.py``. :func:`load_results` reads folders (docs/RESULTS.md),
:func:`render_markdown` and :func:`render_html` turn the runs into text.
"""

from conformance.report.html import render_html
from conformance.report.load import (
    FAILING,
    STATUSES,
    Case,
    ReportError,
    Run,
    load_results,
    load_run,
)
from conformance.report.markdown import render_markdown

__all__ = [
    "FAILING",
    "STATUSES",
    "Case",
    "ReportError",
    "Run",
    "load_results",
    "load_run",
    "render_html",
    "render_markdown",
]
