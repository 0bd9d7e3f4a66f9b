"""Benchmark of the conformance suite (run on demand, prints figures; not a test).

    python bench/bench_conformance.py [--backend echo_npu] [--skip-default] [--all] [--compile]
                                      [--baseline REV|none]

Each figure is printed against its target (issue 13, 2 cores). Ratios are taken within one run
(both sides measured in the same run, interleaved), so they hold on a machine that others load;
absolute seconds are printed with the load average and the CPU seconds the run used (the CPU time
over 2 is what the run would take on 2 idle cores).

- `pytest conformance -k masked_fill` wall <= 2x the wall of `python -c "import torch"` (issue 85;
  3x before it), and its CPU split by kind of process
- harness overhead <= 1.5x a hand-written comparison of the same samples (inputs placed on both
  sides, both ops, read-back, assert_close; add.Tensor float32, every layout), with the ratio to
  the bare op pair alone (<= 10x, issue 85): the median of 5 fresh processes and their spread
  (harness_overhead.py), and where the harness's time goes, phase by phase
- the default run (the README's main job, `python -m pytest conformance`: registered overloads,
  the model-derived fallback set, the values axis; its cases in one forked runner per core,
  `--runners auto`) <= 75 s (issue 85); and the same cases with `-n 2` (xdist workers relaying
  each case's reports), its CPU and wall against the main job's and its verdicts case by case
- the modes (`-grad`, `-inference` cases, issue 21): the default run <= 1.5x the same run with
  `--modes none` (both timed in this run)
- the value sets of issue 43 (-arguments, -sizes, -models): the default run <= 1.2x the same run
  with only the older ones (`--values ordinary,special,promotion`), CPU seconds, warm caches
- the heap red zones of issue 48 (on by default): the default run <= 1.1x the same run with
  `--heap-zones off` (CPU seconds)
- the runtime contract cases and the -asynchronous mode of issue 46 (on by default): the default
  run <= 1.15x the same run without them (`--ignore conformance/contract`, `--modes` without
  asynchronous; CPU seconds)
- the collectives family (issue 47): its default selection (`pytest conformance/collectives
  -n 2`, every world size) <= 10 min; the default run carries only its core selection
- `--fallback-ops all -n 2` <= 5 min (with --all: takes minutes)
- the compiled axis (with --compile, issue 33): `--modes compile -k compile` (the -compile
  cases, the compile and AOTInductor scenarios) with cold and then warm Inductor caches, and
  its CPU seconds against the default run's (the default run keeps it out while that ratio is
  above 0.5x: the default run must stay within 1.5x)
- echo_npu: every registered overload has samples (from the suite's own account)
- the default run's CPU by kind of process (controller, xdist workers, zygotes, runners, task
  processes); echo_npu's run with copy_ignores_offset (a tenth of the cases fail) <= 1.3x the
  clean run's CPU; with ECHO_NPU_NO_FALLBACK=1 (module cases and scenarios fail by the device's
  exception, as torch_opencl's do) under half of the run's wall outside the cases; and the
  default run's CPU milliseconds a case at least 1.5x lower than at
  `--baseline` (an older commit run in this bench run on the same backend with its own main job,
  `-n 2`; this commit's `-n 2` beside it, like for like, printed without a target, with its
  CPU by kind of process; verdicts compared case by case)
- a new user's first runs: a fresh checkout of HEAD, `-n 2` with cold caches (the sample
  capture, the heap-zone build and Inductor's compiles included: the cold figure), then warm
  (<= 75 s), and the warning lines (torch's, Python's) each printed to the terminal (target 0;
  issue 85)
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness_overhead  # noqa: E402
import process_cost  # noqa: E402

from conformance.engine.layouts import LAYOUTS  # noqa: E402
from conformance.harness.options import DEFAULT_MODES  # noqa: E402
from conformance.harness.plan import AUTO_RUNNERS, usable_cores  # noqa: E402


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, last output line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    return wall, cpu, lines[-1] if lines else ""


#: the README's main job: the plain pytest process, which runs its cases in one forked runner per
#: core (--runners auto, harness/lanes.py); `-n 2` adds two xdist workers that relay each case's
#: reports and spawn a runner zygote each (timed beside it)
MAIN_JOB: list[str] = []
XDIST = ["-n", "2"]
#: the runners the main job runs at once (plan.runners_of: --runners auto where they are forked)
MAIN_JOB_LANES = min(AUTO_RUNNERS, usable_cores())
#: the harness-overhead ratios: the median of this many fresh processes, each its own median of
#: this many rounds (a process's figures move as a whole: harness_overhead.py)
OVERHEAD_PROCESSES = 5
OVERHEAD_ROUNDS = 9
#: the main job at the baseline commit (118dbd1's README: `-n 2`; it had no runners side by side)
BASELINE_JOB = ["-n", "2"]


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly", *args]


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "OVER TARGET"


def load() -> str:
    return "load avg {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())


def masked_fill_ratio(env: dict[str, str], rounds: int) -> None:
    """Interleaved: import torch, then pytest -k masked_fill, `rounds` times; median ratio."""
    torch_t, pytest_t, torch_c, pytest_c = [], [], [], []
    for _ in range(rounds):
        w, c, _ = run([sys.executable, "-c", "import torch"], env)
        torch_t.append(w)
        torch_c.append(c)
        # timed with its CPU split by kind of process (the last round's is printed below)
        split = process_cost.measured_run(
            pytest_cmd("-k", "masked_fill", "-p", "no:xdist"), REPO, env
        )
        pytest_t.append(split.wall)
        pytest_c.append(split.cpu)
    ratio = statistics.median(p / t for p, t in zip(pytest_t, torch_t, strict=True))
    print(
        f"pytest conformance -k masked_fill: {statistics.median(pytest_t):.2f} s wall "
        f"({statistics.median(pytest_c):.2f} s CPU) vs import torch "
        f"{statistics.median(torch_t):.2f} s wall ({statistics.median(torch_c):.2f} s CPU) -> "
        f"{ratio:.2f}x (target <= 2x, issue 85: {verdict(ratio, 2)}); CPU ratio "
        f"{statistics.median(pytest_c) / statistics.median(torch_c):.2f}x  [{split.summary}] "
        f"[{load()}]"
    )
    # where it goes: the pytest process (imports, collection, accounts, summary) or the cases
    process_cost.print_split("pytest conformance -k masked_fill", split)


def overhead(backend: str, rounds: int, processes: int, env: dict[str, str]) -> None:
    """Harness time of a case against the bare op pair and a hand-written comparison of the
    same samples (harness_overhead.py): the median of `processes` fresh processes' own medians
    (each `rounds` rounds, interleaved per layout), with their spread; 1: in this process (the
    smoke run). Then where the harness's time goes, phase by phase (one instrumented round)."""
    bench = harness_overhead.OverheadBench(backend)
    try:
        if processes > 1:
            found = harness_overhead.in_processes(backend, rounds, processes, env)
        else:
            found = [bench.ratios(rounds)]
        test = [statistics.median(r.test) for r in found]
        ops = [statistics.median(r.ops) for r in found]
        case_ms, test_ms, ops_ms = found[-1].last_ms
        print(
            f"harness overhead, add.Tensor float32 x {len(LAYOUTS)} layouts "
            f"({found[-1].samples} samples): {harness_overhead.spread(test)} a hand-written "
            f"comparison (inputs placed on both sides, both ops, read-back, assert_close; target "
            f"<= 1.5x: {verdict(statistics.median(test), 1.5)}); {harness_overhead.spread(ops)} "
            f"the bare op pair alone (target <= 10x, issue 85: "
            f"{verdict(statistics.median(ops), 10)}) [last round: harness {case_ms:.1f} ms, "
            f"hand-written {test_ms:.1f} ms, ops {ops_ms:.1f} ms] [{load()}]"
        )
        total, seconds = bench.phases()
    finally:
        bench.close()
    print(f"  where the harness's {total * 1e3:.1f} ms go (one round, nested phases overlap):")
    for phase, sec in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"    {phase:52s} {sec * 1e3:7.1f} ms  {100 * sec / total:5.1f} %")


def cases_in(summary: str) -> int:
    """The cases pytest's last line counts (`13840 passed, 1671 skipped, 2 xfailed in ...`)."""
    return sum(
        int(n)
        for n, _ in re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed|error)", summary)
    )


def full_run(
    name: str, args: list[str], env: dict[str, str], target_min: float
) -> process_cost.MeasuredRun:
    """Time one run; returns it (its CPU seconds: a load-independent measure of its work; its
    split by kind of process; its records' statuses). Its cases a second and CPU milliseconds a
    case are printed beside it (issue 85): growth of the suite and cost per case told apart."""
    results = tempfile.mkdtemp()
    run(pytest_cmd(*args, "--results", results, "--collect-only"), env)  # import caches
    shutil.rmtree(results, ignore_errors=True)
    measured = process_cost.measured_run(pytest_cmd(*args), REPO, env)
    wall, cpu, summary = measured.wall, measured.cpu, measured.summary
    cases = cases_in(summary)
    per_case = (
        f"; {cases} cases, {cases / wall:.0f} a second, {1000 * cpu / cases:.1f} ms CPU a case"
        if cases
        else ""
    )
    print(
        f"{name}: {wall / 60:.2f} min wall (target <= {target_min:g} min: "
        f"{verdict(wall, target_min * 60)}); {cpu:.0f} s CPU, i.e. {cpu / 2 / 60:.2f} min on 2 "
        f"idle cores{per_case}  [{summary}] [{load()}]"
    )
    return measured


def modes_ratio(env: dict[str, str], with_modes_cpu: float) -> None:
    """The default run against the same run without the -grad/-inference cases (CPU seconds:
    the two runs are sequential, so wall time would compare two different loads)."""
    without = full_run(
        "default run without modes (--modes none)", [*MAIN_JOB, "--modes", "none"], env, 2
    ).cpu
    ratio = with_modes_cpu / without
    print(
        f"modes: the default run costs {ratio:.2f}x the run without them (CPU seconds; "
        f"target <= 1.5x: {verdict(ratio, 1.5)})"
    )


def value_sets_ratio(env: dict[str, str], default_cpu: float) -> None:
    """The default run against the same run without the value sets of issue 43 (CPU seconds;
    both after a collect-only pass, so their samples are built and cached: a warm run)."""
    older = [*MAIN_JOB, "--values", "ordinary,special,promotion"]
    without = full_run("default run without -arguments/-sizes/-models", older, env, 2).cpu
    ratio = default_cpu / without
    print(
        f"value sets: the default run costs {ratio:.2f}x the run without -arguments, -sizes "
        f"and -models (CPU seconds; target <= 1.2x: {verdict(ratio, 1.2)})"
    )


def heap_zones_ratio(env: dict[str, str], default_cpu: float) -> None:
    """The default run against the same run without the suite's heap red zones (CPU seconds)."""
    without = full_run(
        "default run with --heap-zones off", [*MAIN_JOB, "--heap-zones", "off"], env, 2
    ).cpu
    ratio = default_cpu / without
    print(
        f"heap red zones: the default run costs {ratio:.2f}x the run without them (CPU "
        f"seconds; target <= 1.1x: {verdict(ratio, 1.1)})"
    )


def runtime_ratio(env: dict[str, str], default_cpu: float) -> None:
    """The default run against the same run without the runtime contract cases and the
    -asynchronous mode (CPU seconds)."""
    modes = ",".join(m for m in DEFAULT_MODES if m != "asynchronous")
    args = [*MAIN_JOB, "--ignore", "conformance/contract", "--modes", modes]
    without = full_run("default run without the contract and -asynchronous", args, env, 2).cpu
    ratio = default_cpu / without
    print(
        f"runtime contract: the default run costs {ratio:.2f}x the run without the contract "
        f"cases and -asynchronous (CPU seconds; target <= 1.15x: {verdict(ratio, 1.15)})"
    )


def collectives_selection(env: dict[str, str]) -> None:
    """The collectives family's default selection alone, as `nox -s collectives` runs it."""
    results = tempfile.mkdtemp()
    cmd = [sys.executable, "-m", "pytest", "conformance/collectives", "-q", "-p", "no:randomly"]
    wall, cpu, summary = run([*cmd, "-n", "2", "--results", results], env)
    shutil.rmtree(results, ignore_errors=True)
    print(
        f"collectives default selection (-n 2): {wall / 60:.2f} min wall (target <= 10 min: "
        f"{verdict(wall, 600)}); {cpu:.0f} s CPU  [{summary}] [{load()}]"
    )


def new_families_ratio(env: dict[str, str], default_cpu: float) -> None:
    """What the modules (core selection) and autocast families add to the default run: the
    default run's CPU seconds against the same run without their folders."""
    ignored = ["--ignore", "conformance/modules", "--ignore", "conformance/autocast"]
    _, without, _ = run(pytest_cmd(*MAIN_JOB, *ignored), env)
    ratio = default_cpu / without
    print(
        f"modules (core) + autocast families: the default run costs {ratio:.2f}x the run "
        f"without them (CPU seconds; target <= 1.15x: {verdict(ratio, 1.15)}) [{load()}]"
    )


def vendor_keys_share(env: dict[str, str]) -> None:
    """What issue 80's cases cost in one default run, from its records' durations: the op
    cases of the kernels at the autograd key, the suite's own module specs, the autocast family
    (now also on lower-precision and mixed inputs) and the -reference value set."""
    import json

    from conformance.engine.modules.suite_specs import SPECS

    results = tempfile.mkdtemp()
    wall, _, _ = run(pytest_cmd(*MAIN_JOB, "--results", results), env)
    rows = [
        json.loads(line)
        for f in sorted(os.listdir(results))
        if f.startswith("cases-")
        for line in open(os.path.join(results, f))
        if line.strip()
    ]
    shutil.rmtree(results, ignore_errors=True)
    specs = tuple(f"test_module[{spec.name}-" for spec in SPECS)
    autograd_key = {"gelu", "dropout", "native_dropout", "lstm"}  # echo_npu's: gelu

    def part(keep) -> tuple[int, float]:
        chosen = [r for r in rows if keep(r)]
        return len(chosen), sum(r.get("duration") or 0.0 for r in chosen)

    total = sum(r.get("duration") or 0.0 for r in rows)
    for name, keep in (
        ("op cases of kernels at the autograd key", lambda r: r.get("family", "ops") == "ops"
         and r["op"] in autograd_key),
        ("the suite's own module specs", lambda r: r["id"].startswith(specs)),
        ("the autocast family (float32, lower and mixed inputs)",
         lambda r: r.get("family") == "autocast"),
        ("the -reference cases (OpInfo's ordinary reference inputs)",
         lambda r: r["id"].endswith("-reference]")),
    ):  # fmt: skip
        n, seconds = part(keep)
        print(
            f"issue 80: {name}: {n} cases, {seconds:.1f} s of the run's {total:.0f} s of case "
            f"time ({100 * seconds / max(total, 1e-9):.1f} %; the run: {wall / 60:.2f} min wall)"
        )


def compile_axis(env: dict[str, str], default_cpu: float | None) -> None:
    """The -compile cases and compiled-path scenarios, cold then warm Inductor caches (a fresh
    cache folder of this run), against the default run's CPU seconds."""
    cache = tempfile.mkdtemp(prefix="inductor-cache-")
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": cache}
    args = [*MAIN_JOB, "--modes", "compile", "-k", "compile"]  # as the default run is run
    name = "compiled axis (--modes compile -k compile)"
    cold = full_run(f"{name}, cold Inductor caches", args, env, 10).cpu
    warm = full_run(f"{name}, warm Inductor caches", args, env, 10).cpu
    shutil.rmtree(cache, ignore_errors=True)
    if default_cpu:
        within = 1 + warm / default_cpu
        print(
            f"compiled axis: {cold / default_cpu:.2f}x (cold) and {warm / default_cpu:.2f}x "
            f"(warm) the default run's CPU seconds: in the default run it would make it "
            f"{within:.2f}x (target <= 1.5x: {verdict(within, 1.5)})"
        )


def cost_per_case(env: dict[str, str], now: process_cost.MeasuredRun, baseline: str | None) -> None:
    """The default run's (`now`) CPU split by kind of process, and (with a baseline commit) that
    commit's main job (`BASELINE_JOB`), on the same backend and torch, in this bench run: its CPU
    milliseconds a case against this commit's main job and against this commit's run of the same
    command line (like for like), measured after it, and the verdicts case by case (issue 85)."""
    process_cost.print_split("the default run", now)
    process_cost.print_case_time("the default run", now, MAIN_JOB_LANES)
    if env.get("CONFORMANCE_BACKEND") == "echo_npu":
        failure_cost(env, now)
    if not baseline:
        return
    path = process_cost.worktree(REPO, baseline)
    try:
        old_env = process_cost.worktree_env(env, path)
        cmd = pytest_cmd(*BASELINE_JOB)
        process_cost.measured_run(cmd, path, old_env)  # warm-up: that commit's sample cache
        old = process_cost.measured_run(cmd, path, old_env)
        # measured after it: the main job, and the baseline's own command line (like for like)
        main = process_cost.measured_run(pytest_cmd(*MAIN_JOB), REPO, env)
        same = process_cost.measured_run(pytest_cmd(*BASELINE_JOB), REPO, env)
    finally:
        process_cost.drop_worktree(REPO, path)
    # the target is the main job's (the run a user starts); the same command line is printed
    # beside it, without a verdict, so a gain from the main job's new shape is not read as a
    # gain per case under xdist (its workers and controller relay every case's reports in both)
    for name, run_now, aim in (
        ("the main job", main, True),
        (f"{' '.join(BASELINE_JOB)} (like for like, no target)", same, False),
    ):
        ratio = old.ms_a_case / run_now.ms_a_case
        target = f" (target >= 1.5x: {'ok' if ratio >= 1.5 else 'UNDER TARGET'})" if aim else ""
        print(
            f"CPU a case, {name}: {run_now.ms_a_case:.2f} ms ({run_now.cases} cases, "
            f"{run_now.cpu:.0f} s, {run_now.wall:.0f} s wall) against {old.ms_a_case:.2f} ms at "
            f"{baseline} ({' '.join(BASELINE_JOB)}, its main job; {old.cases} cases, "
            f"{old.cpu:.0f} s, {old.wall:.0f} s wall): {ratio:.2f}x lower{target} [{load()}]"
        )
        print("  " + process_cost.compare_verdicts(old, run_now))
    process_cost.print_split(f"this commit's {' '.join(BASELINE_JOB)}", same)
    process_cost.print_split(f"{baseline}'s default run", old)


def fresh_clone(env: dict[str, str]) -> None:
    """A new user's first runs (issue 85): a fresh checkout of HEAD (a git worktree: no sample
    cache, no heap-zone library built, a fresh Inductor cache), `-n 2` twice: cold (sample
    capture included), then warm; the warning lines (torch's, Python's) each printed to the
    terminal. HEAD as committed (the working tree's changes are not in it), with the installed
    backend; "cold" is the suite's caches and Inductor's, not the OS page cache."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    path = process_cost.worktree(REPO, "HEAD")
    inductor = tempfile.mkdtemp(prefix="bench-inductor-")
    try:
        new_env = process_cost.worktree_env(env, path) | {"TORCHINDUCTOR_CACHE_DIR": inductor}
        cold = process_cost.measured_run(pytest_cmd(*XDIST), path, new_env)
        warm = process_cost.measured_run(pytest_cmd(*XDIST), path, new_env)
    finally:
        process_cost.drop_worktree(REPO, path)
        shutil.rmtree(inductor, ignore_errors=True)
    for name, measured, target in (("cold caches", cold, None), ("warm", warm, 75.0)):
        aim = f" (target <= {target:g} s: {verdict(measured.wall, target)})" if target else ""
        shown = f"; first: {measured.warning_lines[0][:100]}" if measured.warning_lines else ""
        print(
            f"fresh checkout of {rev}, -n 2, {name}: {measured.wall:.0f} s wall{aim}, "
            f"{measured.cpu:.0f} s CPU, {measured.cases} cases; warning lines (torch's or "
            f"Python's) in the terminal: {len(measured.warning_lines)} (target 0){shown}  "
            f"[{measured.summary}] [{load()}]"
        )


def failure_cost(env: dict[str, str], clean: process_cost.MeasuredRun) -> None:
    """The cost of failure (issue 85): echo_npu's default run with a fault that fails about a
    tenth of its cases (copy_ignores_offset) against the clean run, CPU seconds, and where its
    extra CPU goes."""
    faulted = process_cost.measured_run(
        pytest_cmd(*MAIN_JOB), REPO, {**env, "ECHO_NPU_FAULTS": "copy_ignores_offset"}
    )
    ratio = faulted.cpu / clean.cpu
    counts = collections.Counter(faulted.statuses.values())
    print(
        f"cost of failure: the default run with copy_ignores_offset ({counts['failed']} failed, "
        f"{counts['blocked']} blocked of {faulted.cases}) costs {ratio:.2f}x the clean run's CPU "
        f"(target <= 1.3x: {verdict(ratio, 1.3)}); {faulted.wall / clean.wall:.2f}x its wall "
        f"[{faulted.summary}] [{load()}]"
    )
    process_cost.print_split("the faulted run", faulted)
    process_cost.print_case_time("the faulted run", faulted, MAIN_JOB_LANES)
    # a backend whose device raises (a missing kernel): its module cases and scenarios fail by
    # exception, as most of torch_opencl's did; warmed first (a collection captures the samples
    # of the overloads it has without cpu_fallback), so that the run measured is a warm one
    raising = {**env, "ECHO_NPU_NO_FALLBACK": "1"}
    run(pytest_cmd(*MAIN_JOB, "--collect-only"), raising)
    raised = process_cost.measured_run(pytest_cmd(*MAIN_JOB), REPO, raising)
    share = process_cost.outside_cases(raised, MAIN_JOB_LANES) / raised.wall
    counts = collections.Counter(raised.statuses.values())
    print(
        f"time outside the cases, a backend that raises where it has no kernel "
        f"(ECHO_NPU_NO_FALLBACK=1: {counts['failed']} failed of {raised.cases}): {share:.0%} "
        f"of its {raised.wall:.0f} s wall (target < 50 %: {verdict(share, 0.5)}) [{load()}]"
    )
    process_cost.print_case_time("the raising run", raised, MAIN_JOB_LANES)


def coverage(env: dict[str, str]) -> None:
    """The suite's own account (run header) of registered overloads with samples."""
    proc = subprocess.run(
        # the whole default run's account: under -k it covers only the overloads -k keeps
        pytest_cmd("--collect-only"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if "registered overloads tested" in ln]
    lines += [ln for ln in proc.stdout.splitlines() if "fallback-only overloads" in ln]
    for line in lines:
        print(line)
    m = re.search(r"(\d+) of (\d+) registered overloads tested", proc.stdout)
    if m:
        print(f"registered overloads with samples: {m.group(1)}/{m.group(2)} (target: all)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="echo_npu")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of the ratios")
    parser.add_argument("--skip-default", action="store_true", help="skip the default run")
    parser.add_argument(
        "--cold", action="store_true", help="no warm-up run first (figures of cold caches)"
    )
    parser.add_argument(
        "--baseline",
        default="118dbd1",
        help="an older commit whose default run is measured in this bench run, on the same "
        "backend and torch (a git worktree), for the CPU a case and the verdicts compared case "
        "by case; 'none' to skip (default: 118dbd1, issue 85's reference)",
    )
    parser.add_argument("--all", action="store_true", help="also time --fallback-ops all")
    parser.add_argument(
        "--compile", action="store_true", help="also time the compiled axis (--modes compile)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one round of the harness-overhead figure and its phases only (the self-test "
        "tests/meta/test_bench_smoke.py: a renamed function fails it)",
    )
    opts = parser.parse_args()
    if opts.smoke:
        overhead(opts.backend, 1, 1, dict(os.environ))
        return
    # as on a user's machine, the suite's bytecode is cached: with PYTHONDONTWRITEBYTECODE (set
    # on these machines) every process compiled the suite again, while torch's came from pip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"CONFORMANCE_BACKEND": opts.backend, "CONFORMANCE_RESULTS": "none"}
    unset = "PYTHONDONTWRITEBYTECODE" in os.environ
    dropped = " (PYTHONDONTWRITEBYTECODE unset for the runs)" if unset else ""
    print(f"machine: {os.cpu_count()} cores, {load()}{dropped}")
    if not opts.cold:
        # every figure below is of warm caches (captures, exactness, the value sets' samples,
        # the heap layer): a collect-only pass builds only some, so one default run first
        wall, cpu, summary = run(pytest_cmd(*MAIN_JOB), env)
        print(f"warm-up: the default run, {wall / 60:.2f} min wall, {cpu:.0f} s CPU [{summary}]")
    coverage(env)
    masked_fill_ratio(env, opts.rounds)
    overhead(opts.backend, OVERHEAD_ROUNDS, OVERHEAD_PROCESSES, env)
    default_cpu = None
    if not opts.skip_default:
        default = full_run(
            "default run (README: python -m pytest conformance)", MAIN_JOB, env, 1.25
        )
        default_cpu = default.cpu
        # the same cases under xdist: each worker collects again, spawns a runner zygote that
        # collects a third time, and relays every case's reports to the controller
        xdist = full_run("default run with -n 2 (xdist)", XDIST, env, 1.25)
        print(
            f"  -n 2 against the main job: {xdist.cpu / default.cpu:.2f}x its CPU, "
            f"{xdist.wall / default.wall:.2f}x its wall; "
            + process_cost.compare_verdicts(default, xdist)
        )
        modes_ratio(env, default_cpu)
        value_sets_ratio(env, default_cpu)
        heap_zones_ratio(env, default_cpu)
        runtime_ratio(env, default_cpu)
        new_families_ratio(env, default_cpu)
        vendor_keys_share(env)
        cost_per_case(env, default, None if opts.baseline == "none" else opts.baseline)
        collectives_selection(env)
        fresh_clone(env)
    if opts.compile:
        compile_axis(env, default_cpu)
    if opts.all:
        full_run("--fallback-ops all (-n 2)", ["-n", "2", "--fallback-ops", "all"], env, 5)


if __name__ == "__main__":
    main()
