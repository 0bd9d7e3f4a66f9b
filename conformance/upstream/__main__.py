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
from conformance.upstream.evidence import UpstreamConfig, build
from conformance.upstream.models import DEFAULT_TESTS, UpstreamTest, model
from conformance.upstream.reach import partial_reasons
from conformance.upstream.render import render

__all__ = ["main"]


def _test(text: str) -> UpstreamTest:
    try:
        return model(text)
    except ConformanceUsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: lines of each kind printed (the file lists them all)
SHOWN = 8


def _summary(config: UpstreamConfig) -> list[str]:
    """What the file lists as unmeasured and not excused, in a few lines each."""
    lines = []
    for what, items in (
        ("not measured by the run", config.unmeasured),
        ("not excused", config.not_excused),
    ):
        lines += [f"{what}: {item}" for item in items[:SHOWN]]
        if len(items) > SHOWN:
            lines.append(f"{what}: ... and {len(items) - SHOWN} more (listed in the file)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit status 0, or 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.upstream",
        description=__doc__.split("\n\n")[0],
        epilog="Then, in a PyTorch checkout of the same release: the command the file's "
        "docstring gives (PYTHONPATH=<its folder> python -m pytest -p <its module> test/...).",
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS_DIR", help="results folder(s)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the module to write")
    parser.add_argument(
        "--test",
        action="append",
        type=_test,
        metavar="CLASS.TEST",
        help="a modelled upstream test the entries apply to (repeatable; default: every "
        "modelled test, docs/UPSTREAM.md)",
    )
    parser.add_argument(
        "--allowlist",
        action="store_true",
        help="apply op_allowlist (torch fails a test file whose @ops list it empties)",
    )
    parser.add_argument(
        "--keep-device-restrictions",
        action="store_true",
        help="leave PrivateUse1TestBase.bypass_device_restrictions unset: the tests gated by "
        "@onlyOn (test_compare_cpu) stay skipped and get no entries",
    )
    parser.add_argument(
        "--include-unmeasured",
        action="store_true",
        help="keep OpInfos the run did not measure in the allowlist (their tests run unexcused)",
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="accept results of a run that did not finish or whose files are cut short (the "
        "file says so; what the run did not record excuses nothing)",
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
        partial = [f"{run.path}: {why}" for run in runs for why in partial_reasons(run)]
        if partial and not args.allow_partial:
            raise ConformanceUsageError(
                f"{partial[0]}: measure again, or accept it with --allow-partial"
            )
        tests = tuple(args.test or DEFAULT_TESTS)
        if args.keep_device_restrictions:
            tests = tuple(t for t in tests if not t.needs_bypass)
        warnings.simplefilter("ignore")  # OpInfo captures warn of dtypes they try
        config = build(
            [(run.meta, run.cases) for run in runs],
            source=" ".join(args.results),
            tests=tests,
            cache_dir=args.cache_dir,
            apply_allowlist=args.allowlist,
            bypass_device_restrictions=any(t.needs_bypass for t in tests),
            partial=partial,
            include_unmeasured=args.include_unmeasured,
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
    for line in [*config.partial, *config.prerequisites, *_summary(config)]:
        print(f"warning: {line}", file=sys.stderr)
    print(f"wrote {args.output}: {config.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
