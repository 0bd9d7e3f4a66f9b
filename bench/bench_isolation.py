"""Benchmark of case isolation and backend shapes (run on demand, prints figures; not a test).

    python bench/bench_isolation.py [--rounds 2] [--skip-shapes]

Figures, each against its target (issue 31, 2 cores), both sides measured in this run:

- spawned runners against forked ones on echo_npu's fork-refusing configuration
  (`ECHO_NPU_REFUSE_FORK=1`, a device left uninitialised in the pytest process, so both modes
  work): cases per second with `--isolate spawn` >= 50 % of `--isolate fork`, serial and with
  `-n 2`. A spawned runner costs an interpreter start and a collection, so it is reused across
  cases (replaced after a crash, a hang or `--runner-cases` cases).
- the default run of a backend of another shape (`tests/backends/pyreg_npu`: kernels registered
  from Python, device registered by a function and initialised at import, so every case runs in
  spawned runners; no `as_strided`) through the README's own-backend recipe (`python -m pytest
  --pyargs conformance -n 2` from another folder, `--results` elsewhere) <= 3x echo_npu's
  default run.
- (issue 55) the selection with every echo_npu runtime personality
  (`ECHO_NPU_RUNTIME=threaded,exclusive,slow_init,teardown_hang`: driver threads, a device one
  process may open, a 2 s initialisation, a teardown that blocks) against the plain runtime,
  `-n 2`: cases complete (the personalities cost the slow initialisations and one runner at a
  time); and the seconds each run took to exit after its last line (target <= 5 s).
- `--baseline CHECKOUT` (issue 55): the echo_npu default run (`-n 2`, warm caches) of this
  checkout against another checkout's (the previous commit: `git worktree add /tmp/base
  HEAD~1`), interleaved rounds: ratio <= 1.1x.
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
BACKENDS = os.path.join(REPO, "tests", "backends")
SELECTION = [
    "--ops", "abs,neg,add.Tensor,mul.Tensor,sum.dim_IntList,masked_fill_.Scalar,cat,where.self",
    "--modes", "none",
]  # fmt: skip


def environment(**extra: str) -> dict[str, str]:
    """The machine's environment without the suite's and echo_npu's variables (and with
    bytecode caches on, as on a user's machine), plus `extra`."""
    skip = ("CONFORMANCE_", "ECHO_NPU_", "PYTEST_XDIST", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    return env | extra


def timed(args: list[str], env: dict[str, str], cwd: str) -> tuple[float, int, str]:
    """(wall seconds, cases recorded, pytest's last line) of one run."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    found = re.search(r"(\d+) collected = (\d+) recorded", proc.stdout)
    lines = proc.stdout.strip().splitlines()
    return wall, int(found.group(2)) if found else 0, lines[-1] if lines else proc.stderr[-300:]


def load() -> str:
    return "load avg {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())


def spawn_against_fork(rounds: int) -> None:
    env = environment(ECHO_NPU_REFUSE_FORK="1", CONFORMANCE_RESULTS="none")
    timed(["conformance", *SELECTION, "--collect-only"], env, REPO)  # warm the sample cache
    for workers in ("0", "2"):
        rates: dict[str, list[float]] = {"fork": [], "spawn": []}
        for _ in range(rounds):
            for mode in ("fork", "spawn"):  # interleaved: both see the same load
                args = ["conformance", *SELECTION, "-n", workers, "--isolate", mode]
                wall, cases, last = timed(args, env, REPO)
                rates[mode].append(cases / wall if wall else 0.0)
        fork, spawn = max(rates["fork"]), max(rates["spawn"])
        ratio = spawn / fork if fork else 0.0
        print(
            f"-n {workers}: spawn {spawn:.1f} cases/s, fork {fork:.1f} cases/s: spawn is "
            f"{100 * ratio:.0f} % of fork (target >= 50 %: {'ok' if ratio >= 0.5 else 'UNDER'})"
            f"  [{last}] [{load()}]"
        )


def backend_shapes() -> None:
    """echo_npu's default run against pyreg_npu's through the README's own-backend recipe."""
    user = tempfile.mkdtemp(prefix="bench-user-")
    elsewhere = tempfile.mkdtemp(prefix="bench-results-")
    try:
        echo_env = environment()
        timed(["conformance", "--collect-only", "--results", "none"], echo_env, REPO)
        echo_wall, echo_cases, echo_last = timed(
            ["conformance", "-n", "2", "--results", "none"], echo_env, REPO
        )
        pyreg_env = environment(PYTHONPATH=BACKENDS)
        recipe = ["--pyargs", "conformance", "--backend", "pyreg_npu:register_devices"]
        results = os.path.join(elsewhere, "results")
        timed([*recipe, "--collect-only", "--results", results], pyreg_env, user)
        pyreg_wall, pyreg_cases, pyreg_last = timed(
            [*recipe, "-n", "2", "--results", results], pyreg_env, user
        )
    finally:
        shutil.rmtree(user, ignore_errors=True)
        shutil.rmtree(elsewhere, ignore_errors=True)
    ratio = pyreg_wall / echo_wall if echo_wall else 0.0
    print(f"echo_npu default run -n 2: {echo_wall:.0f} s, {echo_cases} cases  [{echo_last}]")
    print(f"pyreg_npu default run -n 2: {pyreg_wall:.0f} s, {pyreg_cases} cases  [{pyreg_last}]")
    print(
        f"pyreg_npu / echo_npu: {ratio:.2f}x (target <= 3x: {'ok' if ratio <= 3 else 'OVER'})"
        f"  [{load()}]"
    )


def personalities(rounds: int) -> None:
    """The selection on echo_npu's GPU-like runtime against its plain one (issue 55)."""
    plain = environment(CONFORMANCE_RESULTS="none")
    gpu_like = environment(
        CONFORMANCE_RESULTS="none",
        ECHO_NPU_RUNTIME="threaded,exclusive,slow_init,teardown_hang",
        ECHO_NPU_DEVICE_LOCK=os.path.join(tempfile.gettempdir(), "bench-isolation.lock"),
    )
    walls: dict[str, list[float]] = {"plain": [], "gpu-like": []}
    for _ in range(rounds):
        for name, env in (("plain", plain), ("gpu-like", gpu_like)):
            wall, cases, last = timed(["conformance", *SELECTION, "-n", "2"], env, REPO)
            walls[name].append(wall)
            print(f"  {name}: {wall:.1f} s, {cases} cases [{last}]")
    ratio = min(walls["gpu-like"]) / min(walls["plain"])
    print(f"runtime personalities / plain runtime: {ratio:.2f}x  [{load()}]")


def exit_after_summary() -> None:
    """Seconds between the run's last line and its exit, with a teardown that blocks forever."""
    env = environment(CONFORMANCE_RESULTS="none", ECHO_NPU_RUNTIME="teardown_hang")
    args = [sys.executable, "-m", "pytest", "-q", "conformance", "--ops", "abs", "--modes"]
    proc = subprocess.Popen(
        [*args, "none", "--isolate", "none"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    last = time.perf_counter()
    assert proc.stdout is not None
    for _ in proc.stdout:
        last = time.perf_counter()
    try:
        proc.wait(timeout=60)
        took = time.perf_counter() - last
    except subprocess.TimeoutExpired:
        proc.kill()
        took = float("inf")
    verdict = "ok" if took <= 5 else "OVER"
    print(f"exit after the last line (--isolate none, a teardown that blocks): {took:.2f} s "
          f"(target <= 5 s: {verdict})")  # fmt: skip


def against_baseline(checkout: str, rounds: int) -> None:
    """This checkout's default run against `checkout`'s, same machine, interleaved."""
    env = environment(CONFORMANCE_RESULTS="none")
    walls: dict[str, list[float]] = {"this": [], "baseline": []}
    for where in (REPO, checkout):  # warm both caches
        timed(["conformance", "--collect-only"], env, where)
    for _ in range(rounds):
        for name, where in (("this", REPO), ("baseline", checkout)):
            wall, cases, last = timed(["conformance", "-n", "2"], env, where)
            walls[name].append(wall)
            print(f"  {name}: {wall:.0f} s, {cases} cases [{last}]")
    ratio = min(walls["this"]) / min(walls["baseline"])
    verdict = "ok" if ratio <= 1.1 else "OVER"
    print(f"default run, this / baseline: {ratio:.2f}x (target <= 1.1x: {verdict})  [{load()}]")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="repetitions of each mode")
    parser.add_argument("--skip-shapes", action="store_true", help="skip the default runs")
    parser.add_argument("--baseline", help="a checkout whose default run is timed against this")
    opts = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {load()}")
    spawn_against_fork(opts.rounds)
    personalities(opts.rounds)
    exit_after_summary()
    if opts.baseline:
        against_baseline(opts.baseline, opts.rounds)
    if not opts.skip_shapes:
        backend_shapes()


if __name__ == "__main__":
    main()
