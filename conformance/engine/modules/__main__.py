"""One module case again, without pytest (the `script` of a record):

    python -m conformance.engine.modules nn.BatchNorm2d-float32-train-contiguous-0 \\
        [--backend MODULE[:FUNCTION]] [--device TYPE] [--diverged]

loads the backend, runs the case on CPU and on the device, prints the verdict and exits 0
(passed) or 1. `--diverged` prints only the first op that diverged, as one JSON line (what a
failed case's search asks of a child process: engine/modules/divergence.py).
"""

from __future__ import annotations

import argparse
import json
import sys

from conformance.engine.backend import load_backend
from conformance.engine.modules.cases import ModuleCase


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a module case id")
    parser.add_argument("--backend", default=None, help="the backend module (MODULE:FUNCTION)")
    parser.add_argument("--device", default=None, help="the device type")
    parser.add_argument("--diverged", action="store_true", help="only search the diverged op")
    args = parser.parse_args(argv)
    try:
        case = ModuleCase.parse(args.case)
    except ValueError as exc:
        parser.error(str(exc))
    device = load_backend(args.backend, args.device).device
    if args.diverged:
        from conformance.engine.modules.divergence import first_divergence
        from conformance.engine.modules.step import prepare, run_step

        prepared = prepare(case)
        _, seeds = run_step(prepared, "cpu")
        print(json.dumps({"diverged": first_divergence(prepared, device, seeds)}), flush=True)
        return 0
    from conformance.engine.modules.judge import NotComparable, judge

    try:
        verdict = judge(case, device)
    except NotComparable as exc:
        print(f"skipped: {case}: {exc}")
        return 0
    print(f"{'failed' if verdict.check else 'passed'}: {case}")
    if verdict.message:
        print(verdict.message)
    return 1 if verdict.check else 0


if __name__ == "__main__":
    sys.exit(main())
