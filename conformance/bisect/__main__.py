"""Command line: ``python -m conformance.bisect EXPR --good A --bad B [options]``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from conformance.bisect.index import DEFAULT_INDEX, IndexError_, list_versions, resolve_version
from conformance.bisect.output import to_json, to_markdown
from conformance.bisect.runner import ROOT, VenvProbeRunner, gated_fault_env, no_env
from conformance.bisect.search import BisectError, ProbeRunner, bisect_versions

EPILOG = """\
examples:
  python -m conformance.bisect 'mul.Tensor-float32-contiguous-native' --good 2.7 --bad 2.12
  python -m conformance.bisect masked_fill --good 2.5 --bad 2.15 --markdown bisect.md
  # self-test: a fault that is active from torch 2.10 on; bisect must name 2.10.0
  python -m conformance.bisect 'mul.Tensor-float32-contiguous-native' --good 2.5 --bad 2.15 \\
      --fault leak --fault-from 2.10

Exit status: 0 found, 2 bad input or a probe that could not run."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m conformance.bisect",
        description="Find the first torch release where a conformance case changes outcome.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("expression", help="case id or pytest -k expression")
    p.add_argument("--good", required=True, help="a release where it passes (2.8 = latest 2.8.x)")
    p.add_argument("--bad", required=True, help="a newer release where it fails")
    p.add_argument("--index-url", default=None, help=f"package index (default {DEFAULT_INDEX})")
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the result as Markdown")
    p.add_argument(
        "--venv-dir",
        default=str(ROOT / ".nox" / "bisect-venvs"),
        help="cached venvs, one per torch version (default .nox/bisect-venvs)",
    )
    p.add_argument(
        "--work-dir",
        default=str(ROOT / "results" / "bisect"),
        help="probe logs and results (default results/bisect)",
    )
    p.add_argument(
        "--discard-venvs", action="store_true", help="delete each venv after its probe (disk)"
    )
    p.add_argument("--python", default="3.11", help="python of the probe venvs (default 3.11)")
    p.add_argument("--fault", default="", help="echo_npu fault to set from --fault-from on")
    p.add_argument("--fault-from", default="", help="torch version from which --fault is active")
    return p


def main(argv: Sequence[str] | None = None, runner: ProbeRunner | None = None) -> int:
    """Run the command line; ``runner`` replaces the real installs (tests)."""
    args = build_parser().parse_args(argv)
    try:
        versions = list_versions(args.index_url or DEFAULT_INDEX, pre=args.pre)
        good = resolve_version(args.good, versions)
        bad = resolve_version(args.bad, versions)
        if good >= bad:
            raise BisectError(f"--good {good} must be older than --bad {bad}")
        env_for = no_env
        if args.fault or args.fault_from:
            if not (args.fault and args.fault_from):
                raise BisectError("--fault and --fault-from go together")
            env_for = gated_fault_env(args.fault, resolve_version(args.fault_from, versions))
        if runner is None:
            runner = VenvProbeRunner(
                args.expression,
                venv_dir=Path(args.venv_dir).resolve(),
                work_dir=Path(args.work_dir).resolve(),
                index_url=args.index_url,
                pre=args.pre,
                python=args.python,
                env_for=env_for,
                discard_venvs=args.discard_venvs,
            )
        span = [v for v in versions if good <= v <= bad]
        print(
            f"bisect: {len(span)} releases {good} .. {bad}: " + ", ".join(map(str, span)),
            file=sys.stderr,
        )
        start = time.monotonic()
        result = bisect_versions(args.expression, versions, good, bad, runner)
        result.seconds = round(time.monotonic() - start, 1)
    except (BisectError, IndexError_) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    markdown = to_markdown(result)
    for target, text in ((args.json, to_json(result)), (args.markdown, markdown)):
        if target:
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
