"""Write a :class:`~conformance.bisect.search.BisectResult` as Markdown or JSON."""

from __future__ import annotations

import json

from conformance.bisect.search import BisectResult


def to_json(result: BisectResult) -> str:
    """The result as indented JSON."""
    return json.dumps(result.to_json(), indent=2) + "\n"


def to_markdown(result: BisectResult) -> str:
    """The result as Markdown: the answer, then one table row per probe."""
    if result.exact:
        answer = f"- **First bad: torch {result.first_bad}** (last good: {result.last_good})"
    else:
        answer = (
            f"- **First bad: one of torch {', '.join(result.candidates)}** (last good: "
            f"{result.last_good}): a range, because {', '.join(result.candidates[:-1])} could "
            "not be tested"
        )
    lines = [f"## Bisect: `{result.expression}`", "", answer]
    skipped = [p for p in result.probes if p.version in result.skipped]
    if skipped:
        lines.append(
            "- Skipped (no verdict; the search went on around them): "
            + "; ".join(f"{p.version} ({p.outcome}: {p.detail or 'see log'})" for p in skipped)
        )
    lines += [
        f"- Range: {result.good} .. {result.bad}, {len(result.versions)} releases: "
        + ", ".join(result.versions),
        f"- Probes: {len(result.probes)} ({result.installs} installs), "
        f"wall time {result.seconds:.0f} s",
        "",
        "| # | torch | outcome | time (s) | installed | log | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, p in enumerate(result.probes, 1):
        detail = p.detail.replace("|", "\\|")
        lines.append(
            f"| {n} | {p.version} | {p.outcome} | {p.seconds:.1f} | "
            f"{'yes' if p.installed else 'cached'} | `{p.log}` | {detail} |"
        )
    return "\n".join(lines) + "\n"
