"""Benchmark: the CI relay's budget selection on echo_npu (run on demand, prints figures).

    python bench/crcr_selection.py [--budget 20m] [--tight 0.5]

1. The default run (`pytest conformance -n 2`) goes into a fresh results store, as a CRCR job's
   first run would: the selection's basis.
2. `python -m conformance.history select --budget 20m` is run as the CRCR workflow runs it, and
   the suite with that selection; its wall time against the budget (target: within it).
3. The same with a budget of `--tight` times the first run's wall (a selection that must leave
   ops out): the estimate against the measured wall, which tells whether the estimate can be
   trusted where the budget binds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _suite(results: Path, extra: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "ECHO_NPU_"))}
    cmd = [sys.executable, "-m", "pytest", "conformance", "-n", "2", "-q", "-p", "no:randomly",
           "--results", str(results), *extra]  # fmt: skip
    start = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.monotonic() - start


def _history(store: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "conformance.history", "--store", str(store), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="20m")
    parser.add_argument("--tight", type=float, default=0.5, help="fraction of the first wall")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as folder:
        root = Path(folder)
        store = root / "history.db"
        first = _suite(root / "run1" / "crcr", [])
        _history(store, "add", str(root / "run1" / "crcr"))
        print(f"first run (the basis): {first:.0f} s wall, load {os.getloadavg()[0]:.1f}")
        for label, budget in ((args.budget, args.budget), ("tight", f"{int(first * args.tight)}s")):
            chosen = _history(
                store, "select", "--cell", "crcr", "--budget", budget, "--fixed", "15"
            )
            selection = chosen.stdout.split()
            wall = _suite(root / f"run-{label}" / "crcr", selection)
            from conformance.history.relay import parse_budget

            limit = parse_budget(budget)
            verdict = "within" if wall <= limit else "OVER"
            print(f"budget {budget}: {chosen.stderr.strip()}; measured {wall:.0f} s = "
                  f"{wall / limit:.2f}x the budget ({verdict})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
