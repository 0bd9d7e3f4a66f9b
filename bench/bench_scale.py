"""Scale bench (issue 22, part 3): the suite's start-up, memory and speed for echo_npu (its 69
registered overloads) and for `tests/backends/scale_backend.py` (echo_npu plus generated
CPU-as-device kernels, about 1,400 registered overloads with samples), side by side.

    python bench/bench_scale.py [--skip-cold] [--slice 10] [--backends echo_npu,scale_backend]

echo_npu must be importable (built); the bench puts bench/ and tests/backends/ on PYTHONPATH
itself. The default pass starts with cold caches in a fresh folder (about 25 minutes on 2 cores
that others load: every OpInfo sample of 1,400 overloads is captured); `--skip-cold` times the
repository's own pytest cache, warmed first (about 5 minutes once warm); `--cache-dir DIR` keeps
a cache between runs. Printed per backend, each figure against its target:

- start-up of `pytest conformance --collect-only` (every case of the default run) split into
  import, discovery, coverage account, isolation probe and collection (bench/startup_probe.py
  says what each stage holds), with cold caches (a fresh pytest cache dir: every OpInfo sample
  captured again; no target) and then warm ones (target <= 20 s)
- peak RSS of the pytest process (the warm collection) and of its largest runner (the slice run
  below); target <= 2 GiB each, so that `-n 2` and its runners fit a 7 GB CI machine
- cases/s of a run of a slice: --slice overloads evenly spaced in the sorted registered list,
  every dtype, layout, path, value set and mode, one pytest process with forked runners (no -n);
  no target (the scale backend's kernels copy every argument to CPU: slower than echo_npu's)
- growth: each cost in all and per overload with cases (the default run's: registered ones with
  samples, the model-derived fallback set, -grad-only decompositions), the scale backend's over
  echo_npu's (1.0x: linear in the overloads; below: a fixed cost shared)

Wall seconds on a machine others may load: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = [os.path.join(REPO, "bench"), os.path.join(REPO, "tests", "backends")]
STARTUP_TARGET_S = 20.0
RSS_TARGET_MIB = 2048.0
STAGES = (
    "import",
    "discovery",
    "coverage",
    "isolation",
    "collection",
    "cases",
    "startup",
    "startup_cpu",
)
STAGE_NAMES = {
    "import": "import (interpreter, pytest, torch, suite, backend)",
    "discovery": "discovery (registrations, selections)",
    "coverage": "coverage account",
    "isolation": "isolation probe (child process)",
    "collection": "collection (items)",
    "cases": "  of which the case list",
    "startup": "start-up total",
    "startup_cpu": "  CPU seconds of the pytest process",
}


@dataclass
class Figures:
    """What the bench measured for one backend."""

    backend: str
    registered: list[str]
    cold: dict[str, float] = field(default_factory=dict)
    warm: dict[str, float] = field(default_factory=dict)
    collected: int = 0
    overloads: int = 0  # of the default run: registered with samples, fallback-only, grad-only
    rss_mib: float = 0.0
    runner_rss_mib: float = 0.0
    slice_ops: int = 0
    slice_cases: int = 0
    cases_per_s: float = 0.0


def environment(backend: str) -> dict[str, str]:
    path = os.pathsep.join([*PATHS, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # the suite's bytecode cached, as on a user's machine (PYTHONDONTWRITEBYTECODE is set on
    # these machines: every process compiled the suite again while torch's came from pip)
    return {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": path,
        "CONFORMANCE_BACKEND": backend,
        "CONFORMANCE_RESULTS": "none",
    }


def registered(backend: str) -> list[str]:
    """The backend's registered overloads, asked in a process of their own (one PrivateUse1
    backend per process)."""
    code = (
        f"import json, {backend}; from conformance.engine.discovery import registered_overloads;"
        " print(json.dumps(registered_overloads()))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=environment(backend), capture_output=True, text=True
    )
    if proc.returncode:
        sys.exit(f"bench_scale: importing {backend} failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pytest_run(backend: str, args: list[str], cache_dir: str) -> dict:
    """One `pytest conformance` with bench/startup_probe.py; its JSON."""
    out = os.path.join(cache_dir, f"startup-{backend}.json")
    env = {**environment(backend), "BENCH_STARTUP_OUT": out, "BENCH_T0": repr(time.time())}
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly"]
    cmd += ["-p", "startup_probe", "-o", f"cache_dir={cache_dir}", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if not os.path.exists(out):
        tail = (proc.stdout + proc.stderr).strip()[-800:]
        sys.exit(f"bench_scale: {' '.join(cmd)} wrote no figures:\n{tail}")
    with open(out) as f:
        data = json.load(f)
    os.remove(out)
    return data


def measure(backend: str, cache_dir: str, cold: bool, slice_size: int) -> Figures:
    fig = Figures(backend, registered(backend))
    collect = ["--collect-only"]
    if cold:
        fig.cold = pytest_run(backend, collect, cache_dir)["stages"]
    else:  # warm whatever the cache holds, untimed
        pytest_run(backend, collect, cache_dir)
    warm = pytest_run(backend, collect, cache_dir)
    fig.warm, fig.collected, fig.rss_mib = warm["stages"], warm["collected"], warm["rss_mib"]
    fig.overloads = warm["overloads"]
    n = len(fig.registered)
    chosen = [fig.registered[i * n // slice_size] for i in range(min(slice_size, n))]
    ran = pytest_run(backend, ["--ops", ",".join(chosen)], cache_dir)
    fig.slice_ops, fig.slice_cases = len(chosen), ran["collected"]
    fig.cases_per_s = ran["collected"] / ran["stages"]["run"]
    fig.runner_rss_mib = ran["children_rss_mib"]
    return fig


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "OVER TARGET"


def growth(small: Figures, large: Figures, a: float, b: float) -> str:
    """Large over small, in all and per overload with cases ("1.00x": linear in them)."""
    n, m = small.overloads, large.overloads
    if not a or not n or m == n:
        return ""
    return f"{b / a:6.1f}x total, {(b / m) / (a / n):5.2f}x per overload"


def report(figs: list[Figures]) -> None:
    head = "".join(f"{f'{f.backend} ({len(f.registered)})':>24}" for f in figs)
    print(f"{'figure':52}{head}   growth / target")
    pair = len(figs) == 2

    def row(name: str, values: list[float], unit: str, target: str = "", grows=True) -> None:
        cells = "".join(f"{v:>20.2f} {unit:3}" for v in values)
        grow = growth(figs[0], figs[1], values[0], values[1]) if pair and grows else ""
        print(f"{name:52}{cells}   {grow}{'; ' if grow and target else ''}{target}")

    for kind in ("cold", "warm"):
        if not all(getattr(f, kind) for f in figs):
            continue
        print(f"-- start-up, {kind} caches (pytest conformance --collect-only)")
        for stage in STAGES:
            values = [getattr(f, kind)[stage] for f in figs]
            target = ""
            if stage == "startup":
                over = [verdict(v, STARTUP_TARGET_S) for v in values]
                target = (
                    f"target <= {STARTUP_TARGET_S:g} s: {'/'.join(over)}"
                    if kind == "warm"
                    else "no target"
                )
            row(STAGE_NAMES[stage], values, "s", target)
    print("-- size and memory")
    row(
        "overloads with cases (registered, fallback, -grad)",
        [f.overloads for f in figs],
        "",
        grows=False,
    )
    row("collected cases (default run)", [f.collected for f in figs], "")
    memory = (("peak RSS, pytest process", "rss_mib"), ("peak RSS, runners", "runner_rss_mib"))
    for name, attr in memory:
        values = [getattr(f, attr) for f in figs]
        over = "/".join(verdict(v, RSS_TARGET_MIB) for v in values)
        row(name, values, "MiB", f"target <= {RSS_TARGET_MIB:g} MiB: {over}")
    print("-- run of a slice (one process, forked runners)")
    row("overloads in the slice", [f.slice_ops for f in figs], "", grows=False)
    row("cases in the slice", [f.slice_cases for f in figs], "", grows=False)
    row("cases/s", [f.cases_per_s for f in figs], "", "no target", grows=False)
    print(f"load avg {os.getloadavg()[0]:.1f}/{os.getloadavg()[1]:.1f}, {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="echo_npu,scale_backend")
    parser.add_argument("--skip-cold", action="store_true", help="warm caches only")
    parser.add_argument("--slice", type=int, default=10, help="overloads in the timed run")
    parser.add_argument(
        "--cache-dir", help="pytest cache dir to use (default: a fresh one, removed after)"
    )
    opts = parser.parse_args()
    cold = not opts.skip_cold and not opts.cache_dir
    if opts.cache_dir:
        cache = opts.cache_dir
    elif cold:
        cache = tempfile.mkdtemp(prefix="bench-scale-")
    else:
        cache = os.path.join(REPO, ".pytest_cache")  # the repo's own, warm from earlier runs
    try:
        figs = [measure(b, cache, cold, opts.slice) for b in opts.backends.split(",")]
    finally:
        if cold and not opts.cache_dir:
            shutil.rmtree(cache, ignore_errors=True)
    report(figs)


if __name__ == "__main__":
    main()
