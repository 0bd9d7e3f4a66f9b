"""Command line: ``python -m conformance.bugs RESULTS_DIR... --out DIR [--store STORE]`` (also
``python -m conformance.report RESULTS --bug-reports DIR``): one bug report per finding."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.bugs.report import write_report
from conformance.bugs.script import DIFFERS
from conformance.errors import ConformanceUsageError
from conformance.findings import Finding
from conformance.history.cases import bisect_range
from conformance.history.rows import environment_json
from conformance.history.runs import QuestionError, Runs
from conformance.history.store import Store
from conformance.report.load import ReportError, Run, load_results

EPILOG = """\
Each finding's simplest case runs again with --repro-dir (the backend must be importable here,
with the run's environment: its repro command carries the backend's variables), from this
folder. Its script needs torch and the backend only and is run alone (a fresh interpreter in
which importing the suite fails) for the report's output. Since when it fails comes from the
results store (--store, else $CONFORMANCE_STORE where that store exists).
Exit status: 0, 2 on unreadable input."""


UNKNOWN = (
    "Not known: the store has no run of this case with this backend environment; append runs "
    "of other torch versions (`pytest --store`, docs/HISTORY.md) and give the store with "
    "--store, or run `python -m conformance.bisect`."
)


def _sinces(store: str | None, found: list[tuple[Run, Finding]]) -> list[str]:
    """For each finding, since when it fails (the store opened and its runs read once)."""
    if not store:
        return [UNKNOWN] * len(found)
    with Store(store) as opened, opened.reading() as conn:
        runs = Runs(conn)
        return [_since(runs, finding, run) for run, finding in found]


def _since(runs: Runs, finding: Finding, run: Run) -> str:
    """Since which torch the finding's simplest case fails, from the store's runs."""
    try:
        case_id, name = runs.case(finding.representative.id)
    except QuestionError:
        return UNKNOWN
    found = bisect_range(runs, case_id, name, run.allocator, environment_json(run.meta))
    if not found.by_torch:
        return UNKNOWN
    seen = ", ".join(f"{torch} {status}" for torch, status in found.by_torch.items())
    if found.good and found.bad:
        return (
            f"Fails since torch {found.bad}; passes on {found.good} (the latest verdict per torch "
            f"in the store: {seen}). A bisect between them: `{found.command(run.allocator)}`"
        )
    return f"{found.note or 'Not known'} (the latest verdict per torch in the store: {seen})."


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.bugs",
        description="One Markdown bug report per finding, with a standalone script.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS_DIR")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the reports go")
    parser.add_argument("--store", help="the results store (default: $CONFORMANCE_STORE)")
    args = parser.parse_args(argv)
    store = args.store or os.environ.get("CONFORMANCE_STORE") or None
    if store and "://" not in store and not Path(store).is_file():
        if args.store:
            print(f"error: no results store at {store} (--store: a file `pytest --store` or "
                  "`python -m conformance.history add` wrote)", file=sys.stderr)  # fmt: skip
            return 2
        store = None  # $CONFORMANCE_STORE names one not written yet
    out = Path(args.out)
    try:
        runs = load_results(args.results)
        out.mkdir(parents=True, exist_ok=True)
        found = [(run, finding) for run in runs for finding in run.findings()]
        shown = {None: "no standalone script", DIFFERS: "its script shows the divergence",
                 0: "its script did NOT show the divergence alone"}  # fmt: skip
        for (run, finding), since in zip(found, _sinces(store, found), strict=True):
            path, status = write_report(finding, run, out, since, Path.cwd())
            print(f"wrote {path}: {shown.get(status, f'its script broke (exit {status})')}")
    except (ReportError, ConformanceUsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not found:
        print("no findings: nothing to report", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
