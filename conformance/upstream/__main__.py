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
from conformance.upstream.evidence import build
from conformance.upstream.render import render
from conformance.upstream.targets import DEFAULT_TEMPLATES, Template, template

__all__ = ["main"]


def _test(text: str) -> Template:
    try:
        return template(text)
    except ConformanceUsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        help="a test the expected failures and tolerances apply to (repeatable; default "
        + ", ".join(t.name for t in DEFAULT_TEMPLATES)
        + ", judged at its atol = rtol = 1e-3; others at assertEqual's default tolerance)",
    )
    parser.add_argument(
        "--allowlist",
        action="store_true",
        help="apply op_allowlist (torch fails a test file whose @ops list it empties)",
    )
    parser.add_argument(
        "--bypass-device-restrictions",
        action="store_true",
        help="set PrivateUse1TestBase.bypass_device_restrictions: @onlyOn/@onlyCUDA tests run "
        "on the device (test_compare_cpu is @onlyOn(['cuda', 'xpu']))",
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
            templates=tuple(args.test or DEFAULT_TEMPLATES),
            cache_dir=args.cache_dir,
            apply_allowlist=args.allowlist,
            bypass_device_restrictions=args.bypass_device_restrictions,
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
    for line in [*config.prerequisites, *config.not_excused][:20]:
        print(f"warning: {line}", file=sys.stderr)
    print(f"wrote {args.output}: {config.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
