"""The history's answers as Markdown (what `python -m conformance.history` prints) and as JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from conformance.history.cases import BisectRange, Flake, Point, Timeline
from conformance.history.relay import Level
from conformance.history.runs import RunGroup
from conformance.history.trends import Changes, FindingRow, FindingTimeline, Rates, RunTime


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _when(run: RunGroup | None) -> str:
    return run.label if run is not None else "-"


def _point(point: Point | None) -> str:
    return _when(point.run) if point is not None else "-"


def runs_table(groups: list[RunGroup]) -> str:
    rows = []
    for g in groups:
        shards = f"{len(g.shards)}/{g.shard_count}" if g.shard_count else "whole"
        wall = f"{g.wall_s:.0f} s" if g.wall_s is not None else "did not finish"
        rows.append([g.cell, _when(g), g.backend_version, g.allocator, shards, str(g.cases), wall])
    head = ["cell", "started, torch", "backend", "allocator", "shards", "cases", "wall"]
    return f"## Runs in the store ({len(groups)})\n\n" + _table(head, rows) + "\n"


def failing_table(cell: str, lines: list[Timeline]) -> str:
    title = f"## Failing in the latest run of {cell}: {len(lines)} case(s)\n\n"
    if not lines:
        return title + "Nothing fails.\n"
    rows = [
        [t.case, t.points[-1].status, _point(t.failing_since()), _point(t.last_passed()),
         str(t.flips())]
        for t in lines
    ]  # fmt: skip
    head = ["case", "status", "failing since", "last passed", "flips"]
    return title + _table(head, rows) + "\n"


def timeline_text(line: Timeline) -> str:
    since, passed, first = line.failing_since(), line.last_passed(), line.first_failed()
    out = [f"## {line.case} in {line.cell}", ""]
    out.append(f"- failing since: {_point(since)}" if since else "- not failing in its latest run")
    out.append(f"- last passed: {_point(passed)}")
    out.append(f"- first failed in the store: {_point(first)}")
    out.append(f"- flips: {line.flips()} in {len(line.recorded)} run(s) that recorded it")
    rows = [
        [_when(p.run), p.status, p.check or "", p.finding or "", (p.message or "")[:100]]
        for p in line.points
    ]
    out += ["", _table(["run", "status", "check", "finding", "message"], rows), ""]
    return "\n".join(out)


def finding_text(line: FindingTimeline) -> str:
    out = [f"## {line.finding} in {line.cell}: {line.title or '(not in this cell)'}", ""]
    out.append(f"- first seen: {_when(line.first_seen)}; last seen: {_when(line.last_seen)}")
    out.append(f"- appeared or went {line.flips} time(s)")
    rows = [[_when(g), str(n) if n else "-"] for g, n in line.counts]
    return "\n".join([*out, "", _table(["run", "cases"], rows), ""])


def _findings(title: str, found: list[FindingRow]) -> list[str]:
    if not found:
        return []
    rows = [[f.finding, f.title, str(f.cases), f.note or f.repro] for f in found]
    return [f"### {title} ({len(found)})", "", _table(["id", "finding", "cases", "how"], rows), ""]


def changes_text(change: Changes) -> str:
    previous = _when(change.previous) if change.previous else "none (the cell's first run)"
    out = [f"## Findings of {change.cell}: {_when(change.latest)} against {previous}", ""]
    out.append(
        f"{len(change.new)} new, {len(change.fixed)} fixed, {change.kept} still open, "
        f"{len(change.moved)} failing under another finding, {len(change.unjudged)} not judged now"
    )
    out.append("")
    out += _findings("New", change.new)
    out += _findings("Fixed", change.fixed)
    out += _findings("Failing under another finding", change.moved)
    out += _findings("Not judged in the latest run", change.unjudged)
    return "\n".join(out)


def flaky_text(flakes: list[Flake], days: int, most: int = 0) -> str:
    """The flaky cases (``most``: at most that many rows, 0: all)."""
    title = f"## Flaky cases: {len(flakes)} (failed and passed on one configuration, {days} days)"
    if not flakes:
        return title + "\n\nNone.\n"
    shown = flakes[:most] if most else flakes
    more = (
        f"\n... and {len(flakes) - len(shown)} more (`flaky --json` lists all)\n"
        if len(shown) < len(flakes)
        else ""
    )
    rows = [
        [f.case, f.cell, f.torch, str(f.failed), str(f.passed), str(f.flips), f"{f.rate:.0%}",
         f.last[:19].replace("T", " ")]
        for f in shown
    ]  # fmt: skip
    head = ["case", "cell", "torch", "failed", "passed", "flips", "flake rate", "last run"]
    return title + "\n\n" + _table(head, rows) + "\n" + more


def rates_text(rates: Rates) -> str:
    what = "failing cases by check" if rates.by == "check" else f"pass rate by {rates.by}"
    head = [rates.by] + [g.started[5:19].replace("T", " ") for g in rates.runs]
    rows = []
    for key, values in rates.table.items():
        if rates.by == "check":
            cells = [f"{v:.0f}" for v in values]
        else:
            cells = ["-" if v is None else f"{v:.1%}" for v in values]
        rows.append([key, *cells])
    return f"## {rates.cell}: {what}, last {len(rates.runs)} run(s)\n\n" + _table(head, rows) + "\n"


def times_text(cell: str, times: list[RunTime]) -> str:
    rows = []
    for t in times:
        g = t.run
        wall = f"{g.wall_s:.0f}" if g.wall_s is not None else "-"
        speed = f"{g.cases_per_s:.1f}" if g.cases_per_s else "-"
        rows.append([_when(g), str(g.cases), wall, f"{g.machine_s:.0f}", speed, str(t.hung)])
    head = ["run", "cases", "wall s", "machine s", "cases/s", "timeouts"]
    return f"## {cell}: run time over {len(times)} run(s)\n\n" + _table(head, rows) + "\n"


def bisect_text(found: BisectRange, allocator: str = "") -> str:
    out = [f"## {found.case} by torch release", ""]
    rows = [[torch, status] for torch, status in found.by_torch.items()]
    out += [_table(["torch", "latest status"], rows), ""]
    if found.good and found.bad:
        out.append(f"A bisect would probe the releases between {found.good} (passes) and "
                   f"{found.bad} (fails):")  # fmt: skip
        out += ["", "    " + found.command(allocator), ""]
    if found.note:
        out += [found.note, ""]
    return "\n".join(out)


def _plain(value: Any) -> Any:
    if isinstance(value, RunGroup):
        return {**dataclasses.asdict(value), "wall_s": value.wall_s, "label": value.label}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def as_json(value: Any) -> str:
    """Any answer of the history as JSON (dataclasses as objects, runs with their times)."""
    return json.dumps(_plain(value), indent=1, default=str) + "\n"


def level_text(level: Level) -> str:
    """The relay's level-3 figures of a cell, and the warnings."""

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    def hours(v: float | None) -> str:
        return "-" if v is None else f"{v / 3600:.2f} h"

    rows = [
        ["job pass rate", pct(level.pass_rate), ">= 90 %"],
        ["timeout rate", pct(level.timeout_rate), "< 1 %"],
        ["median run time", hours(level.median_s), "< 3 h end to end"],
        ["longest run time", hours(level.longest_s), "< 3 h"],
        ["last run", (level.last_run or "-")[:19].replace("T", " "), "within 36 h"],
    ]
    out = [f"## {level.cell}: PyTorch CI relay, level 3 over {level.runs} run(s) in {level.days} "
           "days", "", _table(["figure", "value", "level 3"], rows), ""]  # fmt: skip
    out += [f"- warning: {w}" for w in level.warnings] or ["No warning."]
    return "\n".join(out) + "\n"
