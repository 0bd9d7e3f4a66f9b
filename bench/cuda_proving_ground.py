"""CUDA as the proving ground: the suite on a real accelerator, run as a new user would run it.

    python bench/cuda_proving_ground.py [--out DIR] [--wheels DIR] [--workers N] [--total S]
                                        [--cache-archive FILE]

On a machine with a CUDA GPU and its own torch, this installs the suite into that interpreter
without touching torch (`pip install --no-deps --no-build-isolation -e .`; pure-Python
dependencies the image lacks from `--wheels`, also `--no-deps`), checks that the torch line of
`pip list` is the same before and after, and runs, on `--backend torch --device cuda`:

1. the capability query (`python -m conformance.profile`): its wall time (target: 30 s);
2. the runtime contract family (`pytest conformance/contract`), with pytest's
   `faulthandler_timeout` set as many repositories set it;
3. a collection of the default run (on a fresh machine it builds the sample cache: OpInfo's
   samples captured on CPU for every overload CUDA registers, about 2 minutes and 0.6 GB;
   `--cache-archive` unpacks a `.conformance-cache` tarball made by a run of the same torch
   first, so a short lease is spent on cases), then a seeded sample of the overloads it
   collected (`--ops`, the same sample for a seed);
4. the default run (`pytest conformance -n N`), stopped by SIGTERM at its deadline (the suite
   then records the cases it did not reach as not-run): whatever `--total` leaves;
5. the standalone repro scripts the failing cases of stages 3 and 4 wrote (`--repro-dir`), each
   run twice in a fresh interpreter: as written, and with `NVIDIA_TF32_OVERRIDE=0` (TF32 off in
   cuBLAS and cuDNN): a script that fails without the suite shows a true CUDA-vs-CPU divergence,
   one that passes only with TF32 off shows TF32's; one that passes both ways points at the
   suite (a false failure) or at a tolerance the script does not share.

Each stage gets a deadline, its exit code, its wall time, the seconds between its last output
line and its exit (the exit target: 5 s), whether Python warned about forking a multi-threaded
process, and its results folder. Everything lands in DIR: `summary.json`, `summary.md`, and
`results.tar.gz` (every stage's results, logs and repro scripts). Without a CUDA device it
stops at once with one line ("no CUDA device") and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORK_WARNING = "use of fork() may lead to deadlocks"
CUDA_ARGS = ["--backend", "torch", "--device", "cuda"]
# after SIGTERM the run records every case it did not reach: 64,000 on CUDA took about 30 s on
# an H200 host (900 in 30 s before the torch.backends entry points were read once per process)
GRACE_S = 60.0
STANDALONE_S = 75.0  # seconds kept for the standalone repro scripts (stage 5)
SCRIPT_S = 30.0  # one repro script's limit
ARCHIVED_BYTES = 1 << 20  # a repro's saved inputs larger than this stay out of the archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/cuda_proving_ground.py")
    parser.add_argument("--out", default="cuda-proving-ground", help="folder for the results")
    parser.add_argument("--wheels", help="folder of wheels the image lacks (installed --no-deps)")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 2))
    parser.add_argument(
        "--total", type=float, default=540.0, help="seconds for every stage together"
    )
    parser.add_argument("--sample", type=int, default=40, help="overloads in the seeded sample")
    parser.add_argument(
        "--collect-deadline", type=float, default=180.0, help="seconds for the first collection"
    )
    parser.add_argument("--cache-archive", help="a .conformance-cache tarball to unpack first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--ops", help="overloads (globs, comma-separated) for stage 3 instead of a seeded sample"
    )
    parser.add_argument(
        "--skip", default="", help="stages to leave out, comma-separated (profile, default, ...)"
    )
    parser.add_argument(
        "--standalone-s", type=float, default=STANDALONE_S, help="seconds for stage 5"
    )
    parser.add_argument("--skip-install", action="store_true")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "PYTHONUNBUFFERED": "1"}
    if not _cuda_available(env):
        print("no CUDA device: this script needs a machine with a CUDA GPU and its torch")
        return 2
    t0 = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"python": sys.version.split()[0], "stages": {}}
    if not args.skip_install:
        summary["install"] = _install(args.wheels)
        if not summary["install"]["torch_unchanged"]:
            _write(out, summary)
            print("the install changed torch: stopped")
            return 1
    if args.cache_archive:
        with tarfile.open(args.cache_archive) as tar:
            tar.extractall(REPO, filter="data")
        summary["cache_archive"] = args.cache_archive
    summary["environment"] = _environment(env)
    stages = summary["stages"]

    def left(reserve: float) -> float:
        return max(30.0, args.total - (time.monotonic() - t0) - reserve)

    skip = set(args.skip.split(",")) - {""}
    reserve = 0.0 if "standalone" in skip else args.standalone_s
    if "profile" not in skip:
        stages["profile"] = _run(
            "profile", [sys.executable, "-m", "conformance.profile", *CUDA_ARGS], out, env, 45
        )
        stages["profile"]["target_s"] = 30
        _write(out, summary)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if "contract" not in skip:
        stages["contract"] = _run(
            "contract",
            [*pytest, "conformance/contract", *CUDA_ARGS, "-o", "faulthandler_timeout=30"]
            + ["--results", str(out / "results-contract")],
            out,
            env,
            90,
        )
        _write(out, summary)
    if args.ops:
        sample = args.ops.split(",")
    elif "sample" not in skip:
        sample, stages["collect"] = _sample(args, out, env)
    else:
        sample = []
    if sample:
        stages["sample"] = _run(
            "sample",
            [*pytest, "conformance", *CUDA_ARGS, "--ops", ",".join(sample), "-n", str(args.workers)]
            + ["-o", "faulthandler_timeout=60", "--results", str(out / "results-sample")]
            + ["--repro-dir", str(out / "repros")],
            out,
            env,
            min(150.0, max(60.0, left(reserve + (0 if "default" in skip else 120)))),
        )
        stages["sample"]["overloads"] = sample
        _write(out, summary)
    if "default" not in skip:
        stages["default"] = _run(
            "default",
            [*pytest, "conformance", *CUDA_ARGS, "-n", str(args.workers)]
            + ["--results", str(out / "results-default"), "--repro-dir", str(out / "repros")],
            out,
            env,
            left(reserve + GRACE_S + 15),  # SIGTERM's grace, the archive
        )
    for name in ("contract", "sample", "default"):
        if name in stages:
            stages[name]["records"] = _records(out / f"results-{name}")
    _write(out, summary)
    if "standalone" not in skip:
        summary["standalone"] = _standalone(out / "repros", env, left(15))
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    _write(out, summary)
    _archive(out)
    print((out / "summary.md").read_text())
    return 0


def _cuda_available(env: dict[str, str]) -> bool:
    code = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _pip_torch_line() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "list"], capture_output=True, text=True, check=False
    )
    return next((ln for ln in done.stdout.splitlines() if ln.split()[:1] == ["torch"]), "")


def _install(wheels: str | None) -> dict:
    before = _pip_torch_line()
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    if wheels:
        found = sorted(str(p) for p in Path(wheels).glob("*.whl"))
        if found:
            subprocess.run([*pip, *found], check=True)
    subprocess.run([*pip, "-e", str(REPO)], check=True, cwd=REPO)
    after = _pip_torch_line()
    return {"torch_before": before, "torch_after": after, "torch_unchanged": before == after}


def _environment(env: dict[str, str]) -> dict:
    code = (
        "import torch,json;print(json.dumps({'torch':torch.__version__,"
        "'cuda':torch.version.cuda,'device':torch.cuda.get_device_name(0),"
        "'tf32_matmul':torch.backends.cuda.matmul.allow_tf32,"
        "'tf32_cudnn':torch.backends.cudnn.allow_tf32}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": done.stderr.strip()[-300:]}


def _run(name: str, cmd: list[str], out: Path, env: dict[str, str], deadline: float) -> dict:
    """Run one stage with a deadline (SIGTERM, then SIGKILL `GRACE_S` later); time its exit."""
    log_path = out / f"{name}.log"
    start = time.monotonic()
    last_output, size = start, 0
    stopped = ""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            now = time.monotonic()
            grown = log_path.stat().st_size
            if grown != size:
                last_output, size = now, grown
            if now - start > deadline and not stopped:
                proc.send_signal(signal.SIGTERM)
                stopped = "SIGTERM at the deadline"
            elif now - start > deadline + GRACE_S and stopped == "SIGTERM at the deadline":
                proc.kill()
                stopped = f"SIGKILL {GRACE_S:.0f} s after SIGTERM"
            time.sleep(0.05)
    if log_path.stat().st_size != size:
        last_output = time.monotonic()
    end = time.monotonic()
    text = log_path.read_text(errors="replace")
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
    return {
        "cmd": " ".join(cmd),
        "exit_code": proc.returncode,
        "wall_s": round(end - start, 1),
        "exit_after_output_s": round(end - last_output, 1),
        "deadline_s": deadline,
        "stopped": stopped,
        "fork_warnings": text.count(FORK_WARNING),
        "tail": tail,
        "counts": _counts(text),
    }


def _counts(text: str) -> dict:
    found = re.findall(
        r"(\d+) (passed|failed|skipped|xfailed|xpassed|error|errors|deselected)", text
    )
    counts = {kind: int(n) for n, kind in found[-8:]}
    collected = re.findall(r"conformance: (\d+) collected = (\d+) recorded", text)
    if collected:
        counts["collected"], counts["recorded"] = map(int, collected[-1])
    return counts


def _sample(args: argparse.Namespace, out: Path, env: dict[str, str]) -> tuple[list[str], dict]:
    """A seeded sample of the overloads the default run would test on CUDA, from a collection
    (which also builds the sample cache the later stages read: on a fresh machine, minutes)."""
    cmd = [sys.executable, "-m", "pytest", "conformance", *CUDA_ARGS, "--collect-only", "-q"]
    stage = _run("collect", cmd, out, env, args.collect_deadline)
    text = (out / "collect.log").read_text(errors="replace")
    ids = re.findall(r"test_matches_cpu\[([^\]]+)\]", text)
    # `--ops` names registered overloads (not those reached through a boxed fallback or
    # torch's composite kernels)
    overloads = sorted({i.split("-")[0] for i in ids} & set(_registered(env)))
    stage["overloads_collected"] = len(overloads)
    stage["cases_collected"] = len(ids)
    chosen = random.Random(args.seed).sample(overloads, min(args.sample, len(overloads)))
    return sorted(chosen), stage


def _registered(env: dict[str, str]) -> list[str]:
    """The overloads the backend registered kernels for, as the suite finds them (without
    touching the device)."""
    code = (
        "import json,sys; from conformance.engine.backend import load_backend; "
        "from conformance.engine.discovery import registered_overloads; "
        "b = load_backend(sys.argv[1], sys.argv[2] or None); "
        "print(json.dumps(registered_overloads(b.dispatch_key)))"
    )
    spec = dict(zip(CUDA_ARGS[::2], CUDA_ARGS[1::2], strict=True))
    cmd = [sys.executable, "-c", code, spec["--backend"], spec.get("--device", "")]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return []


def _records(folder: Path) -> dict:
    """Statuses and the cases that did not pass (status, id, check, first line of the message)
    of a stage; the not-run ones are only counted."""
    statuses: dict[str, int] = {}
    failing = []
    for path in sorted(folder.glob("cases-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            status = record.get("status", "?")
            statuses[status] = statuses.get(status, 0) + 1
            if status in ("failed", "crashed", "hung", "error", "torch-bug"):
                message = (record.get("message") or "").strip().splitlines()[:1]
                failing.append([status, record.get("id"), record.get("check"), *message])
    return {"statuses": statuses, "failing": failing}


def _standalone(folder: Path, env: dict[str, str], budget: float) -> dict:
    """Each repro script in a fresh interpreter, as written and with TF32 off, in parallel;
    scripts not reached within `budget` are counted, not run."""
    from concurrent.futures import ThreadPoolExecutor

    scripts = sorted(folder.glob("*.py")) if folder.is_dir() else []
    deadline = time.monotonic() + budget
    no_tf32 = {**env, "NVIDIA_TF32_OVERRIDE": "0"}

    def one(script: Path) -> dict:
        found: dict = {"script": script.name}
        for label, variables in (("as_written", env), ("tf32_off", no_tf32)):
            remaining = deadline - time.monotonic()
            if remaining < 5:
                found[label] = "not run: out of time"
                continue
            try:
                done = subprocess.run(
                    [sys.executable, script.name],
                    cwd=folder,
                    env=variables,
                    capture_output=True,
                    text=True,
                    timeout=min(SCRIPT_S, remaining),
                )
            except subprocess.TimeoutExpired:
                found[label] = "timed out"
                continue
            lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
            found[label] = {"exit": done.returncode, "tail": lines[-3:]}
            if done.returncode == 0:
                break  # agrees as written: TF32 off tells nothing more
        return found

    with ThreadPoolExecutor(max_workers=8) as pool:
        runs = list(pool.map(one, scripts))
    return {"scripts": len(scripts), "runs": runs}


def _archive(out: Path) -> None:
    """results.tar.gz: every stage's results and log, the repro scripts and their small inputs."""
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for path in sorted(out.glob("results-*")) + sorted(out.glob("*.log")):
            tar.add(path, arcname=path.name)
        for path in sorted((out / "repros").glob("*")):
            if path.suffix == ".py" or path.stat().st_size <= ARCHIVED_BYTES:
                tar.add(path, arcname=f"repros/{path.name}")


def _write(out: Path, summary: dict) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = ["# The suite on CUDA", "", f"- environment: {summary.get('environment')}"]
    if "install" in summary:
        lines.append(f"- install: {summary['install']}")
    for name, stage in summary.get("stages", {}).items():
        lines.append(
            f"- {name}: exit {stage['exit_code']}, {stage['wall_s']} s, exit "
            f"{stage['exit_after_output_s']} s after its last output, fork warnings "
            f"{stage['fork_warnings']}, {stage['counts']} {stage['stopped']}"
        )
        records = stage.get("records")
        if records:
            lines.append(f"  - records: {records['statuses']}")
            for case in records["failing"][:40]:
                lines.append(f"    - {' | '.join(str(x) for x in case)[:300]}")
    standalone = summary.get("standalone")
    if standalone:
        lines.append(f"- standalone repro scripts: {standalone['scripts']}")
        for run in standalone["runs"]:
            lines.append(f"  - {json.dumps(run)[:300]}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
