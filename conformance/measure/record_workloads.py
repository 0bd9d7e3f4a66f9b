"""Record the aten overloads the representative model workloads reach, for this torch.

    python -m conformance.measure.record_workloads          # conformance/workloads/torch-X.Y.txt
    python -m conformance.measure.record_workloads --check  # exit 1 if out of date

Runs the workloads of conformance/engine/workloads.py on CPU (no backend needed; the Qwen2
workload needs `transformers`, the `scenarios` extra) and writes the golden list that the
default run's fallback set is derived from, and beside it the calls the workloads made
(torch-X.Y-calls.jsonl: the model shapes of the `-models` cases). Run it for each new torch
minor; review the diff.
"""

from __future__ import annotations

import argparse
import os
import sys

from conformance.engine import workloads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument(
        "--output",
        help="list to write (default: this torch's golden list); the calls file goes beside it",
    )
    opts = parser.parse_args(argv)
    path = opts.output or workloads.golden_path()
    try:
        recorded = workloads.recording()
    except ImportError as exc:
        print(f"record_workloads: {exc}; install the scenarios extra: pip install -e .[scenarios]")
        return 2
    files = {
        path: (workloads.golden_text(recorded.graph), "overloads"),
        workloads.calls_path(path): (workloads.calls_text(recorded.calls), "calls"),
    }
    if opts.check:
        stale = [p for p, (text, _) in files.items() if _read(p) != text]
        for p in stale:
            print(f"{p} is out of date: run python -m conformance.measure.record_workloads")
        for p, (text, what) in files.items():
            if p not in stale:
                print(f"{p} is up to date ({len(text.splitlines())} {what})")
        return 1 if stale else 0
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    for p, (text, what) in files.items():
        with open(p, "w") as f:
            f.write(text)
        print(f"wrote {p} ({len(text.splitlines())} {what})")
    return 0


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


if __name__ == "__main__":
    sys.exit(main())
