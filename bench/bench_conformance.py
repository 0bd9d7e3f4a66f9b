"""Benchmark of the conformance suite (run on demand, prints figures; not a test).

    python bench/bench_conformance.py [--backend echo_npu]

Figures: cold wall time of `pytest conformance -k masked_fill` (fresh process, warm and empty
sample cache), collection time of the whole matrix, cases per second on elementwise ops, and the
harness overhead as a ratio to the bare device + CPU op time. Targets (issue 3, 2 cores):
-k masked_fill <= 10 s, collection <= 5 s, >= 50 cases/s/core, overhead <= 1.5x.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELEMENTWISE = "add.Tensor,sub.Tensor,mul.Tensor,div.Tensor,neg,abs,exp,relu,eq.Tensor,lt.Tensor"


def pytest_wall(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "conformance",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - start, proc.stdout.strip().splitlines()[-1]


def count(summary: str, word: str) -> int:
    m = re.search(rf"(\d+) {word}", summary)
    return int(m.group(1)) if m else 0


def overhead(backend: str) -> tuple[float, float, int]:
    """(case seconds, bare op-pair seconds, samples) for add.Tensor float32 over all layouts."""
    import importlib
    import types

    import torch

    importlib.import_module(backend)
    from conformance.engine.backend import Backend
    from conformance.engine.discovery import resolve
    from conformance.engine.layouts import LAYOUTS
    from conformance.engine.runner import _placed, run_case
    from conformance.engine.samples import calls_for
    from conformance.ops import spec_for

    dev = torch._C._get_privateuse1_backend_name()
    b = Backend(backend, types.ModuleType(backend), dev)
    b.module = sys.modules[backend]
    op = resolve("add.Tensor")
    cache = tempfile.mkdtemp()
    calls = calls_for("add.Tensor", torch.float32, cache)
    case_t = bare_t = 0.0
    n = 0
    for _ in range(3):
        for layout in LAYOUTS:
            t0 = time.perf_counter()
            out = run_case(b, "add.Tensor", spec_for("add.Tensor"), calls, layout, "native")
            case_t += time.perf_counter() - t0
            n += out.samples
            for placed in _placed(calls, layout, op._schema, ()):
                cpu, d = placed.materialize("cpu"), placed.materialize(dev)
                t0 = time.perf_counter()
                op(*cpu.args, **cpu.kwargs)
                op(*d.args, **d.kwargs).cpu()
                bare_t += time.perf_counter() - t0
    shutil.rmtree(cache)
    return case_t, bare_t, n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="echo_npu")
    opts = parser.parse_args()
    env = {**os.environ, "CONFORMANCE_BACKEND": opts.backend, "CONFORMANCE_RESULTS": "none"}
    cache = os.path.join(REPO, ".pytest_cache", "d", "conformance")

    shutil.rmtree(cache, ignore_errors=True)
    t, s = pytest_wall(["-k", "masked_fill"], env)
    print(f"pytest conformance -k masked_fill, empty sample cache : {t:6.2f} s  ({s})")
    t, s = pytest_wall(["-k", "masked_fill"], env)
    print(f"pytest conformance -k masked_fill, warm sample cache  : {t:6.2f} s  ({s})")

    t, s = pytest_wall(["--collect-only"], env)
    print(f"collection of the whole matrix (process wall time)    : {t:6.2f} s  ({s})")

    pytest_wall(["--ops", ELEMENTWISE, "--collect-only"], env)  # warm the cache for these ops
    t, s = pytest_wall(["--ops", ELEMENTWISE], env)
    n = sum(count(s, w) for w in ("passed", "failed", "skipped", "xfailed"))
    t0, _ = pytest_wall(["--ops", ELEMENTWISE, "--collect-only"], env)
    print(
        f"elementwise ops: {n} cases in {t - t0:.2f} s of running on 1 core "
        f"-> {n / max(t - t0, 1e-9):.1f} cases/s"
    )

    case_t, bare_t, samples = overhead(opts.backend)
    print(
        f"harness overhead, add.Tensor float32 x all layouts: case {case_t * 1e3:.1f} ms vs "
        f"bare device+cpu ops {bare_t * 1e3:.1f} ms over {samples} samples "
        f"-> {case_t / max(bare_t, 1e-9):.2f}x"
    )


if __name__ == "__main__":
    main()
