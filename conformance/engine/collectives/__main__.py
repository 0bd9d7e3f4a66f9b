"""One collectives case again, without pytest (the `script` of a record):

    python -m conformance.engine.collectives all_reduce-AVG-float32-33-contiguous-w2-sync \\
        --c10d gloo --device cpu [--backend MODULE] [--timeout 60]

starts its world, runs it, prints the verdict and exits 0 (passed or skipped) or 1.
"""

from __future__ import annotations

import argparse
import sys

from conformance.engine.collectives.judge import evaluate
from conformance.engine.collectives.spec import CollectiveCase
from conformance.engine.collectives.world import Setup, Worlds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a collectives case id")
    parser.add_argument("--c10d", required=True, help="the c10d backend's name")
    parser.add_argument("--device", default="cpu", help="the device type of the tensors")
    parser.add_argument("--backend", default="", help="the module the ranks import first")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    args = parser.parse_args(argv)
    try:
        case = CollectiveCase.parse(args.case)
    except ValueError as exc:
        parser.error(str(exc))
    worlds = Worlds(Setup(args.c10d, args.device, args.backend, args.timeout))
    try:
        verdict = evaluate(worlds, case)
    finally:
        worlds.close()
    print(f"{verdict.status}: {case}")
    if verdict.message:
        print(verdict.message)
    return 0 if verdict.status in ("passed", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
