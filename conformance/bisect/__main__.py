"""Command line: ``python -m conformance.bisect EXPR --good A --bad B [options]``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version

from conformance.bisect.index import DEFAULT_INDEX, IndexError_, list_versions, resolve_version
from conformance.bisect.output import to_json, to_markdown
from conformance.bisect.probe import EnvFor, VenvProbeRunner, gated_env, no_env
from conformance.bisect.search import BisectError, Probe, ProbeRunner, bisect_versions
from conformance.ci.matrix import Matrix
from conformance.ci.matrix_file import CONFORMANCE_MATRIX_ENV, load_matrix
from conformance.ci.matrix_spec import DEFAULT_COMPILE_MODES, MatrixError

EPILOG = """\
examples:
  python -m conformance.bisect 'mul.Tensor-float32-contiguous-native' --good 2.7 --bad 2.12
  python -m conformance.bisect masked_fill --good 2.5 --bad 2.15 --markdown bisect.md
  # your backend: the matrix file that describes it (or $CONFORMANCE_MATRIX)
  python -m conformance.bisect masked_fill --good 2.8 --bad 2.13 --matrix conformance-matrix.toml
  # self-test: a fault that is active from torch 2.10 on; bisect must name 2.10.0
  python -m conformance.bisect 'mul.Tensor-float32-contiguous-native' --good 2.5 --bad 2.15 \\
      --fault leak --fault-from 2.10

A release that cannot be installed or built against is skipped (like `git bisect skip`); the
result names it, and is a range when skipped releases sit right before the first bad one.
Exit status: 0 found (exactly or as a range), 2 bad input or an end that could not run."""


class _Progress:
    """Print each probe's start and outcome to stderr (a probe can take minutes)."""

    def __init__(self, runner: ProbeRunner) -> None:
        self.runner = runner
        self.count = 0

    def probe(self, version: Version) -> Probe:
        self.count += 1
        print(f"bisect: probe {self.count}: torch {version} ...", file=sys.stderr, flush=True)
        probe = self.runner.probe(version)
        detail = f": {probe.detail}" if probe.detail else ""
        print(
            f"bisect: probe {self.count}: torch {version}: {probe.outcome} "
            f"({probe.seconds:.0f} s){detail}",
            file=sys.stderr,
            flush=True,
        )
        return probe


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
    p.add_argument(
        "--matrix",
        metavar="FILE",
        default=None,
        help=f"matrix file describing the backend (default ${CONFORMANCE_MATRIX_ENV}, else "
        "this checkout's matrices/matrix.toml: echo_npu)",
    )
    p.add_argument("--allocator", default=None, help="allocator mode (default: the matrix's)")
    p.add_argument("--sanitizer", default=None, help="sanitizer build (default: none)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="probe the compiled axis: the suite runs with the matrix's [compile] modes (default "
        f"{DEFAULT_COMPILE_MODES}), so -compile case ids and the AOTInductor scenarios select",
    )
    p.add_argument("--json", metavar="FILE", help="write the result as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the result as Markdown")
    p.add_argument(
        "--venv-dir",
        default=str(Path(".nox") / "bisect-venvs"),
        help="cached venvs, one per torch version and build key (default ./.nox/bisect-venvs)",
    )
    p.add_argument(
        "--work-dir",
        default=str(Path("results") / "bisect"),
        help="probe logs and results (default ./results/bisect)",
    )
    p.add_argument(
        "--discard-venvs", action="store_true", help="delete each venv after its probe (disk)"
    )
    p.add_argument("--python", default=None, help="python of the probe venvs (default: matrix)")
    p.add_argument(
        "--fault",
        default="",
        help="injected fault, set in the backend's fault_env variable from --fault-from on",
    )
    p.add_argument(
        "--gate-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any environment variable set from --fault-from on (repeatable)",
    )
    p.add_argument(
        "--fault-from",
        "--gate-from",
        dest="fault_from",
        default="",
        help="torch version from which --fault / --gate-env are active",
    )
    return p


def _compile_modes(matrix: Matrix) -> str:
    """The --modes of a --compile probe: the matrix's [compile] axis, else the default one."""
    return matrix.compiled.modes if matrix.compiled is not None else DEFAULT_COMPILE_MODES


def _env_for(args: argparse.Namespace, matrix: Matrix, versions: Sequence[Version]) -> EnvFor:
    """The version-gated environment of --fault / --gate-env / --fault-from."""
    gated: dict[str, str] = {}
    for item in args.gate_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise BisectError(f"--gate-env {item!r}: expected NAME=VALUE")
        gated[name] = value
    if args.fault:
        variable = matrix.backend.fault_env
        if variable is None:
            raise BisectError(
                f'--fault: {matrix.source} [backend] has no fault_env; add fault_env = "NAME" '
                "or pass --gate-env NAME=VALUE"
            )
        gated[variable] = args.fault
    if not (gated or args.fault_from):
        return no_env
    if not (gated and args.fault_from):
        raise BisectError("--fault (or --gate-env) and --fault-from go together")
    return gated_env(gated, resolve_version(args.fault_from, versions))


def main(argv: Sequence[str] | None = None, runner: ProbeRunner | None = None) -> int:
    """Run the command line; ``runner`` replaces the real installs (tests)."""
    args = build_parser().parse_args(argv)
    try:
        matrix = load_matrix(args.matrix)
        for value, valid, what in (
            (args.allocator, matrix.allocators, "--allocator"),
            (args.sanitizer, matrix.sanitizers, "--sanitizer"),
        ):
            if value is not None and value not in valid:
                raise BisectError(f"{what} {value!r} is not one of {', '.join(valid)}")
        versions = list_versions(args.index_url or DEFAULT_INDEX, pre=args.pre)
        good = resolve_version(args.good, versions)
        bad = resolve_version(args.bad, versions)
        if good >= bad:
            raise BisectError(f"--good {good} must be older than --bad {bad}")
        env_for = _env_for(args, matrix, versions)
        if runner is None:
            runner = VenvProbeRunner(
                args.expression,
                matrix=matrix,
                venv_dir=Path(args.venv_dir).resolve(),
                work_dir=Path(args.work_dir).resolve(),
                index_url=args.index_url,
                pre=args.pre,
                python=args.python,
                allocator=args.allocator,
                sanitizer=args.sanitizer,
                modes=_compile_modes(matrix) if args.compile else "",
                env_for=env_for,
                discard_venvs=args.discard_venvs,
            )
        print(f"bisect: backend {matrix.backend.module} from {matrix.source}", file=sys.stderr)
        span = [v for v in versions if good <= v <= bad]
        print(
            f"bisect: {len(span)} releases {good} .. {bad}: " + ", ".join(map(str, span)),
            file=sys.stderr,
        )
        start = time.monotonic()
        result = bisect_versions(args.expression, versions, good, bad, _Progress(runner))
        result.seconds = round(time.monotonic() - start, 1)
    except (BisectError, IndexError_, MatrixError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"bisect: {result.answer}", file=sys.stderr)
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
