"""The bench runs (issue 61): `bench/bench_conformance.py --smoke` times one round of the harness
against a hand-written comparison and phase by phase, wrapping the functions of the per-case
path by name, so a renamed or removed function fails here, not unseen in the next bench run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_bench_runs_its_smoke_configuration_to_the_end():
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_conformance.py"), "--smoke"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "harness overhead, add.Tensor float32" in out and "target <= 1.5x" in out, out
    assert "the op on CPU and device (invoke)" in out, out  # the phase timer wrapped it
