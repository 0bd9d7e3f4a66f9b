"""Command line: ``python -m conformance.report RESULTS_DIR... [--markdown FILE] [--html FILE]
[--scorecard DIR]``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from conformance.processes import launch
from conformance.report.html import render_html
from conformance.report.load import ReportError, load_results
from conformance.report.markdown import render_markdown
from conformance.report.trends import load_trends

DESCRIPTION = """\
Turn conformance results folders into a Markdown summary and a static HTML page.

Each RESULTS_DIR is either one run (it holds run.json and cases-*.jsonl, as written by
`pytest conformance --results DIR`) or a folder of runs (e.g. results/ after several nox
sessions, or downloaded CI artifacts): every subfolder with results becomes one session of the
report, labelled by its run.json torch version and allocator. A truncated last line (a run that
crashed or was killed) is skipped with a warning."""

EPILOG = """\
examples:
  python -m conformance.report results/conformance-2.8 --markdown -
  python -m conformance.report results --markdown report.md --html report.html
  python -m conformance.report results --step-summary      # append to $GITHUB_STEP_SUMMARY
  python -m conformance.report results --scorecard site     # site/scorecard.md + badge.svg
  python -m conformance.report results/a results/b --diff  # environments and changed verdicts

With neither --markdown, --html, --step-summary nor --scorecard, the Markdown goes to stdout.
Exit status: 0 (also when cases failed: use --fail-on-failures to change that), 1 with
--fail-on-failures if any case crashed/failed/errored/xpassed or was not run, or a run is
incomplete (it did not finish, or shards of it are missing), 2 on unreadable input."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and --help)."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.report",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS_DIR", help="results folder(s)")
    parser.add_argument("--markdown", metavar="FILE", help="write the Markdown ('-': stdout)")
    parser.add_argument("--html", metavar="FILE", help="write the static HTML page")
    parser.add_argument(
        "--step-summary",
        action="store_true",
        help="also append the Markdown to $GITHUB_STEP_SUMMARY (ignored when unset)",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="with two RESULTS_DIR (A B): what differs between their environments (compiler, "
        "glibc, ISA, the variables torch, Inductor and the backend read, versions) next to the "
        "cases whose verdict changed, as Markdown (to --markdown, else stdout)",
    )
    parser.add_argument("--title", default="Conformance report", help="report title")
    parser.add_argument(
        "--max-failures",
        type=int,
        default=100,
        metavar="N",
        help="failure rows per session in the Markdown (default 100; the HTML lists all)",
    )
    parser.add_argument(
        "--fail-on-failures",
        action="store_true",
        help="exit 1 if any case crashed, failed, errored, xpassed or was not run, or a run is "
        "incomplete (did not finish, shards missing)",
    )
    parser.add_argument(
        "--trends",
        metavar="DIR",
        help="the results store's pictures and flaky cases (`python -m conformance.history "
        "pictures --output DIR`): drawn in the HTML page and beside the scorecard, flaky cases "
        "marked",
    )
    parser.add_argument(
        "--crcr",
        metavar="FILE",
        help="what the run reports to PyTorch's CI relay: FILE (the callback's test-results: "
        "counts, findings, timeouts, the run's link) and FILE's <stem>-failed.json "
        "(failed-tests-detail)",
    )
    parser.add_argument(
        "--bug-reports",
        metavar="DIR",
        help="one Markdown bug report per finding, with a script that needs only torch and the "
        "backend (python -m conformance.bugs: runs each finding's simplest case again, so the "
        "backend must be importable here)",
    )
    card = parser.add_argument_group("scorecard (conformance/report/scorecard.py)")
    card.add_argument(
        "--scorecard",
        metavar="DIR",
        help="write DIR/scorecard.md and DIR/badge.svg: a page and a badge to publish",
    )
    card.add_argument(
        "--bisect",
        action="append",
        default=[],
        metavar="JSON",
        help="a `python -m conformance.bisect --json` result: its first bad torch for the "
        "finding that holds its case (repeatable)",
    )
    versions = parser.add_argument_group("torch-version report (conformance/report/versions.py)")
    versions.add_argument("--versions-md", metavar="FILE", help="op x torch-version Markdown")
    versions.add_argument("--versions-html", metavar="FILE", help="same as HTML with a heatmap")
    versions.add_argument(
        "--previous", metavar="DIR", help="a previous nightly's results: new failures/passes"
    )
    versions.add_argument(
        "--variant",
        default="",
        help="which cells form the grid: '' = conformance-<minor>, '-guard', '-asan', ...",
    )
    return parser


def _write(target: str, text: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        runs = load_results(args.results)
        trends = load_trends(args.trends) if args.trends else None
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        for warning in run.warnings:
            print(f"warning: {run.path}: {warning}", file=sys.stderr)
    if args.diff:
        if len(runs) != 2:
            print(
                f"error: --diff compares two runs; {len(args.results)} folder(s) gave "
                f"{len(runs)}: pass two results folders, A then B",
                file=sys.stderr,
            )
            return 2
        from conformance.report.diff import render_diff

        _write(args.markdown or "-", render_diff(*runs))
        return 0
    markdown = render_markdown(runs, title=args.title, max_failures=args.max_failures)
    if args.markdown:
        _write(args.markdown, markdown)
    if args.html:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # noqa: UP017
        _write(args.html, render_html(runs, title=args.title, generated=stamp, trends=trends))
    if args.versions_md or args.versions_html:
        from conformance.report.versions import (
            build_version_grid,
            compare_previous,
            render_versions_html,
            render_versions_markdown,
        )

        grid = build_version_grid(runs, args.variant)
        comparison = None
        if args.previous:
            try:
                comparison = compare_previous(
                    grid, build_version_grid(load_results([args.previous]), args.variant)
                )
            except ReportError as exc:
                print(f"error: --previous: {exc}", file=sys.stderr)
                return 2
        if args.versions_md:
            _write(args.versions_md, render_versions_markdown(grid, comparison))
        if args.versions_html:
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # noqa: UP017
            _write(args.versions_html, render_versions_html(grid, comparison, generated=stamp))
    if args.scorecard:
        from conformance.report.scorecard import write_scorecard

        report = os.path.relpath(args.html, args.scorecard) if args.html else ""
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # noqa: UP017
        try:
            paths = write_scorecard(
                runs,
                args.scorecard,
                bisect=args.bisect,
                report=report,
                generated=stamp,
                trends=trends,
            )
        except (OSError, ValueError) as exc:
            print(f"error: --scorecard: {exc}", file=sys.stderr)
            return 2
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)
    if args.crcr:
        from conformance.report.crcr import write_crcr

        for path in write_crcr(runs, args.crcr):
            print(f"wrote {path}", file=sys.stderr)
    if args.bug_reports:  # a room above the reports: its own process (it runs the backend)
        bugs = ["-m", "conformance.bugs", *args.results, "--out", args.bug_reports]
        if launch.run("tool", bugs, check=False).returncode:
            return 2
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if args.step_summary and summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(markdown)
    written = (args.markdown, args.html, args.versions_md, args.versions_html, args.scorecard)
    written += (args.bug_reports, args.crcr)
    if not (any(written) or args.step_summary):
        sys.stdout.write(markdown)
    if args.fail_on_failures and any(run.failures() or run.incomplete for run in runs):
        for run in runs:
            for reason in run.incomplete:
                print(f"{run.name}: incomplete: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
