"""What PyTorch's Cross-Repository CI Relay (CRCR) asks of a backend's job, from the store: a
selection of cases that fits a time budget, and the level-3 figures over the last runs.

The selection (for a PR-sized job): the ops a change touches where that can be known (their
names in the changed files' paths), then the ops that failed in the cell's recent runs, then a
stable sample (the same ops every time, by a hash of their names), while the estimated wall
time fits the budget; the estimate scales the cell's latest run (its wall time beyond a fixed
start-up cost, shared by its cases in proportion to their recorded durations). The ops chosen
from are every op the cell's runs of the last 30 days ran (each costed by the latest run that
ran it), so a selection's own run never narrows the next selection.

The level-3 figures (pytorch/rfcs RFC-0050's levels; a job is one run of the cell): the job pass
rate (runs that finished with exit status 0), the timeout rate (runs that never finished: killed
by the job's time limit), the median and longest run time, and the time since the last run;
each is warned about before it crosses the level's threshold.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from sqlalchemy import func, select

from conformance.history.runs import BAD, QuestionError, RunGroup, Runs
from conformance.history.schema import CASE_NAMES, RESULTS, RUNS
from conformance.sharding import stable_hash

#: recent runs whose failing ops a selection takes first
RECENT_RUNS = 5
#: the ops a selection chooses from: those of the cell's runs this far back from its latest
UNIVERSE = timedelta(days=30)
#: level 3: at least this job pass rate, under this timeout rate, under these run times
PASS_RATE, TIMEOUT_RATE, MEDIAN_S, LONGEST_S = 0.90, 0.01, 3 * 3600, 3 * 3600
#: warned about this far before the threshold; a backend whose last run is older is degraded
MARGIN_RATE, MARGIN_S, STALE = 0.02, 30 * 60, timedelta(hours=36)


def parse_budget(text: str) -> float:
    """Seconds of `20m`, `1h30m`, `90s` or `1200`; ValueError otherwise."""
    parts = re.fullmatch(r"\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s?)?\s*", text or "")
    if not parts or not any(parts.groups()):
        raise ValueError(f"{text!r} is not a time budget (e.g. 20m, 1h, 90s, 1200)")
    hours, minutes, seconds = (int(g or 0) for g in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


def touched_ops(ops: list[str], changed: list[str]) -> list[str]:
    """The ops whose name starts a word of a changed file's path, underscores aside
    (`SortingKernel.cpp` touches sort, `index_select_kernel.cu` index_select; three letters
    or more)."""
    words = {w.replace("_", "") for p in changed for w in re.split(r"[/.\-]+", p.lower()) if w}
    out = []
    for op in ops:
        name = op.split(".")[0].strip("_").lower().replace("_", "")
        if len(name) >= 3 and any(w.startswith(name) for w in words):
            out.append(op)
    return out


@dataclass
class Selection:
    """The ops chosen, why, and the wall time they are estimated to take."""

    cell: str
    budget_s: float
    ops: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # op -> changed | failed | sample
    estimate_s: float = 0.0
    left_out: int = 0
    basis: RunGroup | None = None

    registered: set[str] = field(default_factory=set)  # ops the backend has a kernel for

    def pytest_args(self) -> list[str]:
        """The suite's arguments: registered ops by --ops, the others by --fallback-ops."""
        if not self.ops:
            return []
        native = [op for op in self.ops if op in self.registered] or ["none"]
        fallback = [op for op in self.ops if op not in self.registered] or ["none"]
        return [f"--ops={','.join(native)}", f"--fallback-ops={','.join(fallback)}"]


def _op_costs(runs: Runs, group: RunGroup) -> dict[str, float]:
    """Seconds of recorded case time per op of one run."""
    query = (
        select(CASE_NAMES.c.op, func.sum(func.coalesce(RESULTS.c.duration, 0.0)))
        .join(CASE_NAMES, CASE_NAMES.c.id == RESULTS.c.case_id)
        .where(RESULTS.c.run_id.in_(group.run_ids), CASE_NAMES.c.family == "ops")
        .group_by(CASE_NAMES.c.op)
    )
    return {op: float(seconds) for op, seconds in runs.conn.execute(query)}


def select_cases(
    runs: Runs, cell: str, budget_s: float, changed: list[str], fixed_s: float = 60.0
) -> Selection:
    """The selection of the module's rule for ``cell`` (see the module docstring)."""
    chosen = Selection(cell, budget_s)
    kept = runs.of_cell(cell)
    if not kept:
        raise QuestionError(f"no run of {cell} with its cases in the store: nothing to estimate")
    latest = kept[-1]
    chosen.basis = latest
    newest = datetime.fromisoformat(latest.started)
    cost: dict[str, float] = {}  # each op's case time in the latest run that ran it
    per_case_s = 1.0
    for group in reversed(kept):  # a selection's run never narrows what later ones choose from
        if datetime.fromisoformat(group.started) < newest - UNIVERSE:
            break
        ran = _op_costs(runs, group)
        if group is latest:
            total = sum(ran.values()) or 1.0
            per_case_s = max((latest.wall_s or total) - fixed_s, 1.0) / total
        for op, seconds in ran.items():
            cost.setdefault(op, seconds)
        rows = runs.conn.execute(select(RUNS.c.registered).where(RUNS.c.id.in_(group.run_ids)))
        chosen.registered |= {op for (text,) in rows for op in json.loads(text or "[]")}
    recent = [i for g in kept[-RECENT_RUNS:] for i in g.run_ids]
    failed = select(CASE_NAMES.c.op).join(RESULTS, RESULTS.c.case_id == CASE_NAMES.c.id)
    failed = failed.where(RESULTS.c.run_id.in_(recent), RESULTS.c.status.in_(sorted(BAD)))
    failing = sorted({op for (op,) in runs.conn.execute(failed.distinct())} & set(cost))
    sample = sorted(cost, key=lambda op: stable_hash(f"{cell}:{op}"))
    chosen.estimate_s = fixed_s
    order = [(op, "changed") for op in touched_ops(sorted(cost), changed)]
    order += [(op, "failed") for op in failing] + [(op, "sample") for op in sample]
    for op, why in order:
        more = cost[op] * per_case_s
        if op in chosen.reasons or (chosen.ops and chosen.estimate_s + more > budget_s):
            continue  # the first op is taken whatever it costs: an empty selection is all
        chosen.ops.append(op)
        chosen.reasons[op] = why
        chosen.estimate_s += more
    chosen.left_out = len(cost) - len(chosen.ops)
    return chosen


@dataclass
class Level:
    """The level-3 figures of a cell's runs in the window, and the warnings about them."""

    cell: str
    days: int
    runs: int
    pass_rate: float | None
    timeout_rate: float | None
    median_s: float | None
    longest_s: float | None
    last_run: str | None
    warnings: list[str] = field(default_factory=list)


def level_figures(runs: Runs, cell: str, days: int = 7, now: datetime | None = None) -> Level:
    """The cell's runs in the last ``days`` days as the relay's level 3 would judge them."""
    now = now or datetime.now(timezone.utc)  # noqa: UP017 (3.10 has no UTC)
    groups = runs.of_cell(cell, with_cases=False)
    window = [g for g in groups if datetime.fromisoformat(g.started) >= now - timedelta(days=days)]
    walls = [g.wall_s for g in window if g.wall_s is not None]
    n = len(window)
    passed = sum(g.finished is not None and g.exitstatus == 0 for g in window)
    level = Level(
        cell, days, n,
        pass_rate=passed / n if n else None,
        timeout_rate=sum(g.finished is None for g in window) / n if n else None,
        median_s=statistics.median(walls) if walls else None,
        longest_s=max(walls) if walls else None,
        last_run=groups[-1].started if groups else None,
    )  # fmt: skip
    say = level.warnings.append
    if level.pass_rate is not None and level.pass_rate < PASS_RATE + MARGIN_RATE:
        say(f"job pass rate {level.pass_rate:.1%} over {n} run(s): level 3 needs at least "
            f"{PASS_RATE:.0%} (fix or expect the failing cases; find the flaky ones)")  # fmt: skip
    if level.timeout_rate is not None and level.timeout_rate >= TIMEOUT_RATE / 2:
        say(f"timeout rate {level.timeout_rate:.1%}: level 3 needs under {TIMEOUT_RATE:.0%}")
    for name, value, limit in (("median", level.median_s, MEDIAN_S),
                               ("longest", level.longest_s, LONGEST_S)):  # fmt: skip
        if value is not None and value >= limit - MARGIN_S:
            say(f"{name} run time {value / 3600:.1f} h: level 3 needs under {limit / 3600:.0f} h "
                "end to end (build and queue included; use a --budget selection)")  # fmt: skip
    if level.last_run is None or datetime.fromisoformat(level.last_run) < now - STALE:
        say(f"no run in the last {STALE.total_seconds() / 3600:.0f} h: the relay marks a backend "
            "without a recent nightly callback degraded")  # fmt: skip
    return level
