"""The harness's cost of a case against two baselines, on the same samples (issue 85).

    python bench/harness_overhead.py [--backend echo_npu] [--rounds 9]   # one process, JSON

One process times, interleaved per layout and round (add.Tensor float32, every layout):

- the harness: each layout's case as a run's call phase runs it (`run_case` inside the case's
  warning recording), on the samples as a process first holds them;
- the bare op pair: the CPU op and the device op on already placed inputs, the device result
  read back (`.cpu()`): what no test can avoid;
- a hand-written comparison: the same, plus placing the inputs on both sides and
  `torch.testing.assert_close` (what a backend team's own test of that op does).

A process's figures move with it as a whole (where its memory landed, its hash seed: about 5 %
between two processes of the same code on these machines, more than between its rounds), so
`bench_conformance.py` takes the ratios from several fresh processes and prints their median
and spread; `PhaseTimer` then splits one round by phase in its own process.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OVERLOAD = "add.Tensor"


class PhaseTimer:
    """Wall time per phase of the harness's per-case path, by wrapping the functions that do
    each phase (bench-only instrumentation: a renamed function fails loudly here)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, phase: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

        self._set(owner, name, timed)
        self._undo.append((owner, name, original))

    @staticmethod
    def _set(owner: object, name: str, value: object) -> None:
        try:
            setattr(owner, name, value)
        except AttributeError:  # a frozen dataclass (checks.SampleCheck)
            object.__setattr__(owner, name, value)

    def restore(self) -> None:
        for owner, name, original in reversed(self._undo):
            self._set(owner, name, original)
        self._undo.clear()


@dataclass
class Ratios:
    """One process's rounds: the harness against the hand-written comparison and the bare op
    pair, per round; the last round's milliseconds; the samples a round runs."""

    test: list[float]
    ops: list[float]
    last_ms: tuple[float, float, float]  # harness, hand-written, bare op pair
    samples: int


class OverheadBench:
    """The samples of add.Tensor float32 on `backend` and the three ways of running them."""

    def __init__(self, backend: str) -> None:
        import torch

        from conformance.engine.backend import Backend
        from conformance.engine.discovery import resolve
        from conformance.ops import spec_for
        from conformance.samples import calls_for

        module = importlib.import_module(backend)
        self.device = torch._C._get_privateuse1_backend_name()
        self.backend = Backend(backend, module, self.device)
        self.op = resolve(OVERLOAD)
        self.spec = spec_for(OVERLOAD)
        self.cache = tempfile.mkdtemp()
        self.calls = calls_for(OVERLOAD, torch.float32, self.cache)

    def close(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)

    def harness(self) -> float:
        """Seconds of every layout's case, on the samples as a process first holds them:
        nothing remembered on them from the last round (a Call pickles without what placing
        and the layout-free runs kept on it)."""
        from conformance.engine.layouts import LAYOUTS
        from conformance.engine.runner import run_case
        from conformance.harness.case_warnings import recorded

        fresh = copy.deepcopy(self.calls)
        t0 = time.perf_counter()
        for layout in LAYOUTS:
            with recorded():  # as a case's call phase runs: its warnings recorded
                run_case(self.backend, OVERLOAD, self.spec, fresh, layout, "native")
        return time.perf_counter() - t0

    def bare(self) -> tuple[float, float, int]:
        """(seconds of the bare op pairs, seconds of the hand-written comparison, samples)."""
        import torch

        from conformance.engine.layouts import LAYOUTS
        from conformance.engine.runner import placed_calls

        op, dev = self.op, self.device
        ops_t = test_t = 0.0
        n = 0
        for layout in LAYOUTS:
            t0 = time.perf_counter()
            for placed in placed_calls(self.calls, layout, op._schema, ()):
                cpu, d = placed.materialize("cpu"), placed.materialize(dev)
                t2 = time.perf_counter()
                expected = op(*cpu.args, **cpu.kwargs)
                actual = op(*d.args, **d.kwargs).cpu()
                ops_t += time.perf_counter() - t2
                torch.testing.assert_close(actual, expected)
                n += 1
            test_t += time.perf_counter() - t0
        return ops_t, test_t, n

    def ratios(self, rounds: int) -> Ratios:
        """`rounds` rounds after one that warms up, harness and baselines interleaved."""
        test, ops = [], []
        last = (0.0, 0.0, 0.0)
        n = 0
        for r in range(rounds + 1):
            case_t = self.harness()
            ops_t, test_t, n = self.bare()
            if r:
                test.append(case_t / test_t)
                ops.append(case_t / ops_t)
                last = (case_t * 1e3, test_t * 1e3, ops_t * 1e3)
        return Ratios(test, ops, last, n)

    def phases(self) -> tuple[float, dict[str, float]]:
        """One more round, instrumented: its seconds and the seconds of each phase."""
        from conformance.engine import checks, consistency, runner, sample_run
        from conformance.engine.placing import PlacedCall

        timer = PhaseTimer()
        timer.wrap(PlacedCall, "materialize", "placing inputs (materialize)")
        timer.wrap(runner, "placed_calls", "choosing placements (per case)")
        timer.wrap(sample_run, "invoke", "the op on CPU and device (invoke)")
        timer.wrap(consistency, "layout_free", "CPU on contiguous copies (layout-free reference)")
        timer.wrap(consistency, "disagreement", "comparing CPU with itself")
        for check in list(checks.CHECKS):
            timer.wrap(check, "run", f"check {check.name}")
        try:
            total = self.harness()
        finally:
            timer.restore()
        return total, timer.seconds


def in_processes(backend: str, rounds: int, processes: int, env: dict[str, str]) -> list[Ratios]:
    """The ratios of `processes` fresh processes, one after another, `rounds` rounds each."""
    found = []
    for _ in range(processes):
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--backend", backend, "--rounds",
             str(rounds)],
            cwd=REPO, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"harness_overhead.py failed: {proc.stderr.strip()[-2000:]}")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        found.append(Ratios(data["test"], data["ops"], tuple(data["last_ms"]), data["samples"]))
    return found


def spread(per_process: list[float]) -> str:
    """`median (min-max of N processes)` of the processes' own medians."""
    mid = statistics.median(per_process)
    if len(per_process) == 1:
        return f"{mid:.2f}x"
    low, high = min(per_process), max(per_process)
    return f"{mid:.2f}x ({low:.2f}-{high:.2f}x over {len(per_process)} processes)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="echo_npu")
    parser.add_argument("--rounds", type=int, default=9)
    opts = parser.parse_args()
    sys.path.insert(0, REPO)
    bench = OverheadBench(opts.backend)
    try:
        found = bench.ratios(opts.rounds)
    finally:
        bench.close()
    print(json.dumps({"test": found.test, "ops": found.ops, "last_ms": found.last_ms,
                      "samples": found.samples}))  # fmt: skip


if __name__ == "__main__":
    main()
