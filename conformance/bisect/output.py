"""Write a :class:`~conformance.bisect.search.BisectResult` as Markdown or JSON."""

from __future__ import annotations

import json

from conformance.bisect.search import BisectResult


def to_json(result: BisectResult) -> str:
    """The result as indented JSON."""
    return json.dumps(result.to_json(), indent=2) + "\n"


def to_markdown(result: BisectResult) -> str:
    """The result as Markdown: the answer, then one table row per probe."""
    lines = [
        f"## Bisect: `{result.expression}`",
        "",
        f"- **First bad: torch {result.first_bad}** (last good: {result.last_good})",
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
