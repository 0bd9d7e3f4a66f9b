"""CUDA as the proving ground: the suite on a real accelerator, run as a new user would run it.

    python bench/cuda_proving_ground.py [--out DIR] [--wheels DIR] [--workers N] [--budget S]

On a machine with a CUDA GPU and its own torch, this installs the suite into that interpreter
without touching torch (`pip install --no-deps --no-build-isolation -e .`; pure-Python
dependencies the image lacks from `--wheels`, also `--no-deps`), checks that the torch line of
`pip list` is the same before and after, and runs, on `--backend torch --device cuda`:

1. the capability query (`python -m conformance.profile`): its wall time (target: 30 s);
2. the runtime contract family (`pytest conformance/contract`), with pytest's
   `faulthandler_timeout` set as many repositories set it;
3. a collection of the default run (on a fresh machine it builds the sample cache: OpInfo's
   samples captured on CPU for every overload CUDA registers, minutes), then a seeded sample
   of the overloads it collected (`--ops`, the same sample for a seed);
4. the default run (`pytest conformance -n N`), stopped by SIGTERM at its deadline (the suite
   then records the cases it did not reach as not-run).

Each stage gets a deadline, its exit code, its wall time, the seconds between its last output
line and its exit (the exit target: 5 s), whether Python warned about forking a multi-threaded
process, and its results folder. Everything lands in DIR: `summary.json`, `summary.md`,
`<stage>.log`, and `results.tar.gz` (every stage's results). Without a CUDA device it stops at
once with one line ("no CUDA device") and exit status 2.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/cuda_proving_ground.py")
    parser.add_argument("--out", default="cuda-proving-ground", help="folder for the results")
    parser.add_argument("--wheels", help="folder of wheels the image lacks (installed --no-deps)")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 2))
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the default run")
    parser.add_argument("--sample", type=int, default=40, help="overloads in the seeded sample")
    parser.add_argument(
        "--collect-deadline", type=float, default=900.0, help="seconds for the first collection"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-install", action="store_true")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "PYTHONUNBUFFERED": "1"}
    if not _cuda_available(env):
        print("no CUDA device: this script needs a machine with a CUDA GPU and its torch")
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"python": sys.version.split()[0], "stages": {}}
    if not args.skip_install:
        summary["install"] = _install(args.wheels)
        if not summary["install"]["torch_unchanged"]:
            _write(out, summary)
            print("the install changed torch: stopped")
            return 1
    summary["environment"] = _environment(env)
    stages = summary["stages"]
    t0 = time.monotonic()
    stages["profile"] = _run(
        "profile", [sys.executable, "-m", "conformance.profile", *CUDA_ARGS], out, env, 60
    )
    stages["profile"]["target_s"] = 30
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    stages["contract"] = _run(
        "contract",
        [*pytest, "conformance/contract", *CUDA_ARGS, "-o", "faulthandler_timeout=30"]
        + ["--results", str(out / "results-contract")],
        out,
        env,
        240,
    )
    sample, stages["collect"] = _sample(args, out, env)
    if sample:
        stages["sample"] = _run(
            "sample",
            [*pytest, "conformance", *CUDA_ARGS, "--ops", ",".join(sample), "-n", str(args.workers)]
            + ["-o", "faulthandler_timeout=60", "--results", str(out / "results-sample")],
            out,
            env,
            240,
        )
        stages["sample"]["overloads"] = sample
    stages["default"] = _run(
        "default",
        [*pytest, "conformance", *CUDA_ARGS, "-n", str(args.workers)]
        + ["--results", str(out / "results-default")],
        out,
        env,
        args.budget,
    )
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    for name in ("contract", "sample", "default"):
        if name in stages:
            stages[name]["records"] = _records(out / f"results-{name}")
    _write(out, summary)
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for path in sorted(out.glob("results-*")):
            tar.add(path, arcname=path.name)
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
    """Run one stage with a deadline (SIGTERM, then SIGKILL 30 s later); time its exit."""
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
            elif now - start > deadline + 30 and stopped == "SIGTERM at the deadline":
                proc.kill()
                stopped = "SIGKILL 30 s after SIGTERM"
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
    overloads = sorted({i.split("-")[0] for i in ids})
    stage["overloads_collected"] = len(overloads)
    stage["cases_collected"] = len(ids)
    chosen = random.Random(args.seed).sample(overloads, min(args.sample, len(overloads)))
    return sorted(chosen), stage


def _records(folder: Path) -> dict:
    """Statuses and the failing cases (id, check, first line of the message) of a stage."""
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
            if status in ("failed", "crashed", "hung", "error", "not-run"):
                message = (record.get("message") or "").strip().splitlines()[:1]
                failing.append([record.get("id"), record.get("check"), *message])
    return {"statuses": statuses, "failing": failing}


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
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
