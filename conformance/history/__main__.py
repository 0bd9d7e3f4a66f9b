"""Command line: ``python -m conformance.history [--store PATH|URL] COMMAND``: append results
folders to the results store and ask it questions over time."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.errors import ConformanceUsageError
from conformance.history import cases, relay, render, trends
from conformance.history.pictures import write_pictures
from conformance.history.runs import Runs
from conformance.history.store import Store
from conformance.report.load import ReportError, load_run, results_folders
from conformance.report.trends import INDEX

#: where the store is when neither --store nor $CONFORMANCE_STORE says
DEFAULT_STORE = "results/history.db"

DESCRIPTION = """\
The results store: every run appended (a SQLite file by default, any SQL server by URL) and the
questions a nightly asks of time: since when a case fails, which findings are new or fixed, which
cases are flaky, how pass rates and run times move, which releases a bisect would probe."""

EPILOG = f"""\
examples:
  python -m conformance.history add results/conformance-2.13
  python -m conformance.history failing                  # since when each failing case fails
  python -m conformance.history changes                  # new and fixed findings
  python -m conformance.history flaky --days 30
  python -m conformance.history case 'add.Tensor-float32-contiguous-native'
  python -m conformance.history rates --by dtype
  python -m conformance.history --store postgresql://user@host/db times

The store: --store, else $CONFORMANCE_STORE, else {DEFAULT_STORE}. A path is a SQLite file; a URL
(postgresql://user@host/db) is a server SQLAlchemy can reach (SQLite and PostgreSQL are tested).
Exit status: 0, 1 when a folder could not be appended, 2 on bad input (one line)."""


def _common(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--store", default=default, help="SQLite file or database URL (below)")
    parser.add_argument("--json", action="store_true", default=default, help="answer as JSON")
    parser.add_argument("--output", "-o", default=default, metavar="FILE", help="write it here")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and --help)."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.history",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(parser, None)
    common = argparse.ArgumentParser(add_help=False)  # the same options after the command
    _common(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser = functools.partial(sub.add_parser, parents=[common])  # type: ignore[method-assign]
    add = sub.add_parser("add", help="append results folders (a run, its shards, a folder of runs)")
    add.add_argument("results", nargs="+", metavar="RESULTS_DIR")
    add.add_argument(
        "--run-group",
        help="the id that ties the shards of one run (e.g. CI's run id); default: shards of one "
        "configuration started within a day of each other",
    )
    sub.add_parser("runs", help="the runs in the store")
    choose = sub.add_parser(
        "select", help="a PR-sized selection that fits --budget: prints the suite's --ops=..."
    )
    choose.add_argument("--budget", required=True, help="wall time, e.g. 20m, 1h, 900")
    choose.add_argument("--cell")
    choose.add_argument("--changed", metavar="FILE", help="the change's files, one path a line")
    choose.add_argument("--fixed", type=float, default=60.0, help="start-up seconds (60)")
    relay = sub.add_parser("relay", help="PyTorch CI relay level-3 figures, warned about early")
    relay.add_argument("--cell")
    relay.add_argument("--days", type=int, default=7, help="window (default 7 days)")
    pictures = sub.add_parser(
        "pictures",
        help="trend pictures per cell (SVG) and trends.json into --output DIR, for "
        "`python -m conformance.report --trends DIR`",
    )
    pictures.add_argument("--last", type=int, default=30, help="runs drawn (default 30)")
    prune = sub.add_parser("prune", help="drop the case rows of old runs (times, findings stay)")
    prune.add_argument("--keep-days", type=int, default=180, help="days of case rows kept")
    sub.add_parser(
        "summary", help="the nightly's section: per cell, its changes, failing cases and flakes"
    )
    for name, text in (
        ("failing", "every case failing in the cell's latest run: since when, last pass"),
        ("changes", "findings new and fixed since the cell's previous run"),
    ):
        sub.add_parser(name, help=text).add_argument("--cell")
    case = sub.add_parser("case", help="a case's timeline in a cell")
    case.add_argument("case", help="a case id, or a part of exactly one")
    case.add_argument("--cell")
    finding = sub.add_parser("finding", help="a finding's timeline in a cell")
    finding.add_argument("finding", help="its id, as reports print it (F1a2b3c4d)")
    finding.add_argument("--cell")
    flaky = sub.add_parser("flaky", help="cases that failed and passed on one configuration")
    flaky.add_argument("--cell", help="one cell (default: every cell)")
    flaky.add_argument("--days", type=int, default=cases.FLAKE_DAYS, help="evidence window")
    rates = sub.add_parser("rates", help="pass rates over runs by family, dtype, ... or check")
    rates.add_argument("--by", choices=trends.RATE_KEYS, default="family")
    rates.add_argument("--cell")
    rates.add_argument("--last", type=int, default=10, help="runs shown (default 10)")
    times = sub.add_parser("times", help="run time, cases a second and timeouts over runs")
    times.add_argument("--cell")
    times.add_argument("--last", type=int, default=30)
    bisect = sub.add_parser("bisect", help="the torch releases a bisect of a case would probe")
    bisect.add_argument("case", help="a case id, or a part of exactly one")
    bisect.add_argument("--allocator", help="only runs of this allocator")
    return parser


def _add(store: Store, folders: list[str], run_group: str | None) -> int:
    failed = 0
    for raw in folders:
        try:
            paths = results_folders(Path(raw))
        except ReportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        for path in paths:
            run = load_run(path)
            for warning in run.warnings:
                print(f"warning: {path}: {warning}", file=sys.stderr)
            try:
                done = store.append(run, run_group)
            except ConformanceUsageError as exc:
                print(f"error: {exc}", file=sys.stderr)
                failed += 1
                continue
            what = "added" if done.new else "already in the store, nothing added:"
            print(f"{what} {path} ({done.cases} cases, run group {done.run_group})")
    return 1 if failed else 0


def _answer(runs: Runs, args: argparse.Namespace) -> tuple[Any, str]:
    """The answer to the question the command asks: (the object, its Markdown)."""
    command = args.command
    if command == "runs":
        return runs.groups, render.runs_table(runs.groups)
    if command == "summary":
        return _summary(runs)
    if command == "flaky":
        found = cases.flaky(runs, runs.cell(args.cell) if args.cell else None, args.days)
        return found, render.flaky_text(found, args.days)
    if command == "bisect":
        case_id, name = runs.case(args.case)
        env = cases.latest_environment(runs, case_id)
        found = cases.bisect_range(runs, case_id, name, args.allocator, env)
        return found, render.bisect_text(found, args.allocator or "")
    cell = runs.cell(args.cell)
    if command == "select":
        return _select(runs, cell, args)
    if command == "relay":
        level = relay.level_figures(runs, cell, args.days)
        return level, render.level_text(level)
    if command == "failing":
        lines = cases.failing_now(runs, cell)
        return [_timeline(t) for t in lines], render.failing_table(cell, lines)
    if command == "case":
        line = cases.timeline(runs, *runs.case(args.case), cell)
        return _timeline(line), render.timeline_text(line)
    if command == "finding":
        found = trends.finding_timeline(runs, args.finding, cell)
        return found, render.finding_text(found)
    if command == "changes":
        change = trends.changes(runs, cell)
        return change, render.changes_text(change)
    if command == "rates":
        table = trends.rates(runs, cell, args.by, args.last)
        return table, render.rates_text(table)
    times = trends.run_times(runs, cell, args.last)
    return times, render.times_text(cell, times)


def _select(runs: Runs, cell: str, args: argparse.Namespace) -> tuple[Any, str]:
    """The selection; its Markdown is the suite's argument (for `$(...)`), the why on stderr."""
    try:
        budget = relay.parse_budget(args.budget)
        changed = Path(args.changed).read_text().split() if args.changed else []
    except (ValueError, OSError) as exc:
        raise ConformanceUsageError(f"select: {exc}") from None
    chosen = relay.select_cases(runs, cell, budget, changed, args.fixed)
    why = Counter(chosen.reasons.values())
    minutes = f"about {chosen.estimate_s:.0f} s of {budget:.0f} s"
    print(f"selected {len(chosen.ops)} op(s) of {cell} ({why['changed']} changed, "
          f"{why['failed']} failed recently, {why['sample']} sampled), {chosen.left_out} left "
          f"out: {minutes}", file=sys.stderr)  # fmt: skip
    return chosen, " ".join(chosen.pytest_args()) + "\n"


def _summary(runs: Runs) -> tuple[Any, str]:
    """Per cell: findings new and fixed, what fails since when, the flaky cases."""
    answer: dict[str, Any] = {}
    parts = [f"# Results over time: {len(runs.groups)} run(s) in the store", ""]
    for cell in runs.cells():
        if not runs.of_cell(cell):
            continue  # pruned: nothing to say of its cases
        change, failing = trends.changes(runs, cell), cases.failing_now(runs, cell)
        flakes = cases.flaky(runs, cell)
        answer[cell] = {"changes": change, "failing": [_timeline(t) for t in failing],
                        "flaky": flakes}  # fmt: skip
        parts += [render.changes_text(change), render.failing_table(cell, failing)]
        parts.append(render.flaky_text(flakes, cases.FLAKE_DAYS, most=50))
    return answer, "\n".join(parts)


def _timeline(line: cases.Timeline) -> dict[str, Any]:
    points = [(p.run.label, p.status) for p in line.points]
    since, passed = line.failing_since(), line.last_passed()
    return {
        "case": line.case,
        "cell": line.cell,
        "failing_since": since.run.started if since else None,
        "last_passed": passed.run.started if passed else None,
        "flips": line.flips(),
        "points": points,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    where = args.store or os.environ.get("CONFORMANCE_STORE") or DEFAULT_STORE
    try:
        with Store(where) as store:
            if args.command == "add":
                return _add(store, args.results, args.run_group)
            if args.command == "pictures":
                if not args.output:
                    raise ConformanceUsageError("pictures: give the folder with --output DIR")
                with store.reading() as conn:
                    index = write_pictures(Runs(conn), Path(args.output), args.last)
                drawn = sum(len(c["pictures"]) for c in index["cells"].values())
                print(f"wrote {drawn} picture(s) and {INDEX} into {args.output}")
                return 0
            if args.command == "prune":
                pruned = store.prune(args.keep_days)
                print(f"pruned the case rows of {pruned} run(s) older than {args.keep_days} days")
                return 0
            with store.reading() as conn:
                answer, text = _answer(Runs(conn), args)
    except ConformanceUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = render.as_json(answer) if args.json else text
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(out, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
