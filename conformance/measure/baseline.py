"""Write an expectations manifest that accepts a run's known failures: the first week's baseline.

    python -m conformance.measure.baseline results/ -o my_npu.toml       # one run (one torch)
    python -m conformance.measure.baseline results/ --dir expectations/  # common + torch-<minor>
    pytest conformance --write-expectations my_npu.toml                   # at the end of a run

One `[[entry]]` per finding (one root cause) and per group of `unsupported` cases, patterns as
narrow as the cases they cover; with results of several torch versions (`--dir`), what fails
alike in every version goes to `common.toml`, the rest to `torch-<minor>.toml`. The manifest is
computed by `conformance/harness/baseline.py` (which a run's --write-expectations uses too);
this is its command line over results folders (docs/RESULTS.md), read once into `CaseRecord`s.
Pure Python (no torch).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence

from conformance.errors import ConformanceUsageError
from conformance.harness.baseline import baseline, write
from conformance.harness.expectations import Manifest, load_manifest
from conformance.record import CaseRecord
from conformance.report.load import load_results

__all__ = ["main"]


def _carried_manifest(records: Iterable[CaseRecord]) -> Manifest:
    """The manifests named by the records (`expected_by`), those that can still be read."""
    paths = sorted({r.expected_by.rsplit(":", 1)[0] for r in records if ":" in r.expected_by})
    readable = [p for p in paths if os.path.isfile(p)]
    try:
        return load_manifest(readable)
    except ConformanceUsageError:
        return Manifest()


def flaky_cases(where: str) -> dict[str, str]:
    """Case id -> why the store at ``where`` calls it flaky (every cell)."""
    from conformance.history.cases import flaky
    from conformance.history.runs import Runs
    from conformance.history.store import Store

    with Store(where) as store, store.reading() as conn:
        return {f.case: f.describe() for f in flaky(Runs(conn))}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit status 0, or 2 on unreadable input."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.measure.baseline",
        description=__doc__.split("\n\n")[0],
        epilog="Then run with --expectations FILE (or put the files in "
        "matrices/expectations/<backend>/, read by default).",
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS_DIR", help="results folder(s)")
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output", metavar="FILE", help="one manifest (one torch version)")
    out.add_argument("--dir", metavar="DIR", help="common.toml + torch-<minor>.toml in DIR")
    parser.add_argument(
        "--store",
        metavar="STORE",
        help="the results store (conformance/history): entries of cases it finds flaky say so",
    )
    args = parser.parse_args(argv)
    try:
        runs = load_results(args.results)
        flaky = flaky_cases(args.store) if args.store else {}
        pairs = [(run.meta, run.cases) for run in runs]
        records = [r for _, rs in pairs for r in rs]
        result = baseline(
            pairs,
            _carried_manifest(records),
            split=bool(args.dir),
            source=", ".join(args.results),
            flaky=flaky,
        )
    except ConformanceUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    paths = write(result, args.output, args.dir)
    print(f"wrote {', '.join(paths)}: {result.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
