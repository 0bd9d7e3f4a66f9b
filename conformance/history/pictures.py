"""Trends drawn from the store, per cell over its last runs: pass rate (all cases and by family),
failing cases by check, findings opened and closed, run time with cases a second and timeouts.

Drawn with matplotlib as SVG files, listed in ``trends.json`` beside them with the flaky cases
(``flaky`` per cell), so the HTML report and the scorecard embed or link them
(``python -m conformance.report RESULTS --trends DIR``) without reading the store themselves.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from conformance.history import cases, trends
from conformance.history.runs import RunGroup, Runs
from conformance.report.trends import INDEX


def _figure(title: str) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "conformance"  # the same picture for the same runs
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small and searchable
    fig, ax = plt.subplots(figsize=(7.5, 3.0), dpi=100)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(True, alpha=0.3)
    return fig, ax


def _svg(fig: Any, ticks: list[str], ax: Any) -> str:
    import matplotlib.pyplot as plt

    ax.set_xticks(range(len(ticks)))
    ax.set_xticklabels(ticks, rotation=45, ha="right", fontsize=7)
    handles, _ = ax.get_legend_handles_labels()
    if handles and ax.get_legend() is None:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _ticks(groups: list[RunGroup]) -> list[str]:
    return [g.started[5:16].replace("T", " ") for g in groups]


def pass_rate(runs: Runs, cell: str, last: int) -> str:
    """Judged cases that passed, all and per family, per run."""
    table = trends.rates(runs, cell, "family", last)
    fig, ax = _figure(f"{cell}: pass rate of judged cases")
    xs = range(len(table.runs))
    for family, values in sorted(table.table.items()):
        ax.plot(xs, [None if v is None else 100 * v for v in values], marker="o", ms=3,
                label=family)  # fmt: skip
    ax.set_ylabel("% passed", fontsize=8)
    return _svg(fig, _ticks(table.runs), ax)


def failing_by_check(runs: Runs, cell: str, last: int) -> str:
    """Failing cases per check, stacked, per run."""
    table = trends.rates(runs, cell, "check", last)
    fig, ax = _figure(f"{cell}: failing cases by check")
    xs = list(range(len(table.runs)))
    bottom = [0.0] * len(xs)
    for check, values in sorted(table.table.items(), key=lambda kv: -sum(kv[1])):
        ax.bar(xs, values, bottom=bottom, label=check, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    if not table.table:
        ax.text(0.5, 0.5, "no failing case", ha="center", transform=ax.transAxes)
    ax.set_ylabel("cases", fontsize=8)
    return _svg(fig, _ticks(table.runs), ax)


def findings_opened_closed(runs: Runs, cell: str, last: int) -> str:
    """Findings open per run, with those opened (new) and closed (gone) since the run before."""
    groups = runs.of_cell(cell, with_cases=False)[-last - 1 :]
    sets = [set(trends.findings_of(runs, g)) for g in groups]
    shown = groups[1:] if len(groups) > last else groups
    offset = len(groups) - len(shown)
    opened, closed, still = [], [], []
    for i in range(offset, len(groups)):
        before = sets[i - 1] if i else set()
        opened.append(len(sets[i] - before))
        closed.append(-len(before - sets[i]))
        still.append(len(sets[i]))
    fig, ax = _figure(f"{cell}: findings opened and closed")
    xs = list(range(len(shown)))
    ax.bar(xs, opened, color="#d62728", width=0.7, label="opened")
    ax.bar(xs, closed, color="#2ca02c", width=0.7, label="closed")
    ax.plot(xs, still, color="#333333", marker="o", ms=3, label="open")
    ax.axhline(0, color="#999999", lw=0.8)
    ax.set_ylabel("findings", fontsize=8)
    return _svg(fig, _ticks(shown), ax)


def run_time(runs: Runs, cell: str, last: int) -> str:
    """Wall time (bars), cases a second (line) and timeouts (marked) per run."""
    times = trends.run_times(runs, cell, last)
    fig, ax = _figure(f"{cell}: run time, cases a second, timeouts")
    xs = list(range(len(times)))
    ax.bar(xs, [t.run.wall_s or 0 for t in times], color="#1f77b4", width=0.7, label="wall s")
    ax.set_ylabel("wall s", fontsize=8)
    speed = ax.twinx()
    speed.plot(xs, [t.run.cases_per_s for t in times], color="#ff7f0e", marker="o", ms=3,
               label="cases/s")  # fmt: skip
    speed.set_ylabel("cases/s", fontsize=8)
    ours, theirs = ax.get_legend_handles_labels(), speed.get_legend_handles_labels()
    ax.legend(ours[0] + theirs[0], ours[1] + theirs[1], fontsize=7, loc="upper left",
              frameon=False)  # fmt: skip
    hung = [(x, t.hung) for x, t in zip(xs, times, strict=True) if t.hung]
    for x, n in hung:
        ax.annotate(f"{n} timeout(s)", (x, 0), fontsize=7, color="#d62728", rotation=90,
                    va="bottom", ha="center")  # fmt: skip
    return _svg(fig, _ticks([t.run for t in times]), ax)


PICTURES = (
    ("pass-rate", "pass rate", pass_rate),
    ("failing-by-check", "failing cases by check", failing_by_check),
    ("findings", "findings opened and closed", findings_opened_closed),
    ("run-time", "run time and timeouts", run_time),
)


def _slug(cell: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", cell)


def write_pictures(runs: Runs, out: Path, last: int = 30) -> dict[str, Any]:
    """Every cell's pictures into ``out`` and their index (INDEX); returns the index."""
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {"cells": {}}
    for cell in runs.cells():
        entry: dict[str, Any] = {"runs": len(runs.of_cell(cell, with_cases=False)),
                                 "pictures": [], "flaky": {}}  # fmt: skip
        if runs.of_cell(cell):
            for key, title, draw in PICTURES:
                name = f"{_slug(cell)}-{key}.svg"
                (out / name).write_text(draw(runs, cell, last), encoding="utf-8")
                entry["pictures"].append({"file": name, "title": title})
            for flake in cases.flaky(runs, cell):
                entry["flaky"][flake.case] = flake.describe()
        index["cells"][cell] = entry
    (out / INDEX).write_text(json.dumps(index, indent=1), encoding="utf-8")
    return index
