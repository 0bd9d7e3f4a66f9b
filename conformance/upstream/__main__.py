"""`python -m conformance.upstream RESULTS -o upstream_config.py`: a measured run as the
configuration of PyTorch's device-generic tests (docs/UPSTREAM.md)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from conformance.errors import ConformanceUsageError
from conformance.report.load import load_results
from conformance.upstream.evidence import DEFAULT_TESTS, build
from conformance.upstream.render import render

__all__ = ["main"]


def _test(text: str) -> tuple[str, str]:
    cls, sep, test = text.partition(".")
    if not sep or not cls or not test.startswith("test"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected Class.test_name")
    return cls, test


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit status 0, or 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.upstream",
        description=__doc__.split("\n\n")[0],
        epilog="Then: PYTHONPATH=<its folder> python -m pytest -p <its module> test/test_ops.py "
        "in a PyTorch checkout of the same release.",
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS_DIR", help="results folder(s)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the module to write")
    parser.add_argument(
        "--test",
        action="append",
        type=_test,
        metavar="CLASS.TEST",
        help="an OpInfo test template the expected failures name (repeatable; default "
        + ", ".join(f"{c}.{t}" for c, t in DEFAULT_TESTS)
        + ")",
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the suite's sample cache (.conformance-cache, or .pytest_cache/d/conformance): "
        "saves recapturing OpInfo samples",
    )
    args = parser.parse_args(argv)
    try:
        runs = load_results(args.results)
        warnings.simplefilter("ignore")  # OpInfo captures warn of dtypes they try
        config = build(
            [(run.meta, run.cases) for run in runs],
            source=" ".join(args.results),
            tests=tuple(args.test or DEFAULT_TESTS),
            cache_dir=args.cache_dir,
        )
    except ConformanceUsageError as exc:  # ReportError included
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = render(config, args.output)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return 2
    for line in [*config.prerequisites, *config.not_excused]:
        print(f"warning: {line}", file=sys.stderr)
    print(f"wrote {args.output}: {config.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
