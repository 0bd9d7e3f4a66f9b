"""Benchmark of what the verdicts cost beyond comparing values (run on demand, not a test).

    python bench/bench_verdicts.py

Figures: the foundation probes of one dtype (run the first time a case of that dtype fails; a
correct backend never pays them), and a faulty run's blame (profiling each failed sample).
Targets (2 cores): probes <= 0.5 s per dtype; `--ops '_copy_from*,abs,add.Tensor'` with an
offset-ignoring copy (every fallback case blocked) <= 2x the same run without the fault.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def probes() -> None:
    import echo_npu
    import torch

    from conformance.engine.foundations import Foundations

    for faults in ([], ["copy_ignores_offset"]):
        echo_npu.set_faults(faults)
        for dtype in (torch.float32, torch.int64, torch.float16, torch.bool):
            start = time.perf_counter()
            broken = Foundations(torch.device("npu", 0)).broken(dtype)
            took = time.perf_counter() - start
            print(f"probes {dtype} faults={faults or '-'}: {took:.3f} s, {len(broken)} broken")
    echo_npu.set_faults([])


def blame() -> None:
    args = [
        sys.executable,
        "-m",
        "pytest",
        "conformance",
        "-q",
        "-p",
        "no:randomly",
        "--results",
        "none",
        "--ops",
        "_copy_from*,abs,add.Tensor",
        "--dtypes",
        "float32",
    ]
    for fault in ("", "copy_ignores_offset"):
        env = {**os.environ, "ECHO_NPU_FAULTS": fault}
        start = time.perf_counter()
        subprocess.run(args, cwd=REPO, env=env, capture_output=True)
        print(f"run with fault {fault or '-'}: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    probes()
    blame()
