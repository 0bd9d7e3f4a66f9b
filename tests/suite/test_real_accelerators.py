"""A run on a GPU-class runtime (issue 55), played by echo_npu's runtime personalities
(`ECHO_NPU_RUNTIME`, docs/BACKEND.md): driver threads whose lock a forked child needs
(`threaded`), a device one process may open (`exclusive`), a slow initialisation (`slow_init`)
and a teardown that blocks at exit (`teardown_hang`). Each run must start, judge every case,
fork only from single-threaded processes (the fork audit of processes/forking.py) and return
within 5 s of its last line; the capability query must answer within 30 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.processes.kinds import misfit
from tests.helpers import REPO, clean_env

# slow: runs under xdist with slow, hanging and exclusive runtimes
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

PERSONALITIES = ["threaded", "exclusive", "slow_init", "teardown_hang"]
ALL = ",".join(PERSONALITIES)
SELECTION = ["-k", "contract or masked_fill_.Scalar", "--dtypes", "float32", "--modes", "none"]
EXIT_LIMIT = 5.0  # seconds between a run's last line and its exit


class TimedRun:
    """A pytest run of the suite: its output, exit code, results and fork audit, and how long
    it took to exit after its last line."""

    def __init__(self, tmp: Path, args: list[str], env: dict[str, str], timeout: float = 300):
        self.results = tmp / f"results-{len(list(tmp.iterdir()))}"
        audit = tmp / f"audit-{len(list(tmp.iterdir()))}"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "conformance"]
        cmd += ["--results", str(self.results), *args]
        lock = tmp / "device.lock"
        full = clean_env(
            {"CONFORMANCE_FORK_AUDIT": str(audit), "ECHO_NPU_DEVICE_LOCK": str(lock), **env}
        )
        log = tmp / f"log-{len(list(tmp.iterdir()))}"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=full, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            start = last = time.monotonic()
            size = 0
            while proc.poll() is None and time.monotonic() - start < timeout:
                if log.stat().st_size != size:
                    size, last = log.stat().st_size, time.monotonic()
                time.sleep(0.05)
            if proc.poll() is None:  # past the limit: the whole session goes
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            elif log.stat().st_size != size:
                last = time.monotonic()
        self.exit_after = time.monotonic() - last
        self.returncode = proc.returncode
        self.output = log.read_text(errors="replace")
        self.forks = audit.read_text().splitlines() if audit.exists() else []

    def records(self) -> list[dict]:
        rows = []
        for path in sorted(self.results.glob("cases-*.jsonl")):
            rows += [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        return rows

    def forks_with_threads(self) -> list[str]:
        """Audit lines of forks made while the process had more than one thread."""
        return [
            ln
            for ln in self.forks
            if not ln.startswith(("refused", "launch ")) and ln.split()[2] != "1"
        ]

    def starts_off_the_table(self) -> list[str]:
        """The launcher's starts (audit lines "launch PARENT HOW CHILD") that the process table
        (processes/kinds.py) does not declare."""
        starts = [ln.split()[1:] for ln in self.forks if ln.startswith("launch ")]
        return [why for parent, how, child in starts if (why := misfit(parent, how, child))]


# each personality once, all four with and without xdist; under xdist the owners are the
# workers (execnet's thread: their zygotes are spawned) and take turns on an exclusive device
RUNS = [
    ("threaded", []),
    ("slow_init", []),
    ("teardown_hang", []),
    ("exclusive", ["-n", "2"]),
    (ALL, []),
    (ALL, ["-n", "2"]),
]


@pytest.mark.parametrize(
    "personality, workers", RUNS, ids=[f"{p}-{'xdist' if w else 'single'}" for p, w in RUNS]
)
def test_a_run_on_each_runtime_judges_every_case_and_exits(tmp_path, personality, workers):
    run = TimedRun(tmp_path, [*SELECTION, *workers], {"ECHO_NPU_RUNTIME": personality})
    assert run.returncode == 0, run.output[-3000:]
    collected = [ln for ln in run.output.splitlines() if " collected = " in ln]
    assert collected and collected[-1].split()[1] == collected[-1].split()[4], collected
    assert "0 failing cases" in run.output
    statuses = {r["status"] for r in run.records()}
    assert statuses <= {"passed", "skipped", "xfailed"}, statuses
    assert run.exit_after < EXIT_LIMIT, f"exited {run.exit_after:.1f} s after its last line"
    assert run.forks and not run.forks_with_threads(), run.forks
    assert any(ln.startswith("zygote:runner") for ln in run.forks), run.forks
    assert not run.starts_off_the_table(), run.starts_off_the_table()
    if "exclusive" in personality:
        assert "one device-owning runner at a time" in run.output


def test_watchdogs_change_no_verdict(tmp_path):
    """pytest's faulthandler_timeout and pytest-timeout's thread method arm watchdog threads in
    the process running the test: a planted failure stays failed with its own message."""
    args = ["--ops", "relu", "--dtypes", "float32", "--modes", "none", "-n", "2"]
    args += ["-o", "faulthandler_timeout=30", "--timeout", "120", "--timeout-method", "thread"]
    run = TimedRun(tmp_path, args, {"ECHO_NPU_FAULTS": "nan_to_zero", "ECHO_NPU_RUNTIME": ALL})
    failed = [r for r in run.records() if r["status"] != "passed" and r["status"] != "skipped"]
    assert failed, run.output[-3000:]
    assert {r["status"] for r in failed} == {"failed"}, failed
    assert all(r["check"] == "values" for r in failed), [(r["id"], r["check"]) for r in failed]
    assert not run.forks_with_threads(), run.forks


def test_a_backend_whose_teardown_hangs_cannot_hold_the_run(tmp_path):
    """--isolate none: the pytest process itself uses the device, so its teardown would block
    at exit; it ends with os._exit after its summary (harness/exiting.py)."""
    args = [*SELECTION, "--isolate", "none", "--collectives", "none"]
    run = TimedRun(tmp_path, args, {"ECHO_NPU_RUNTIME": "teardown_hang"})
    assert run.returncode == 0, run.output[-3000:]
    assert run.exit_after < EXIT_LIMIT, f"exited {run.exit_after:.1f} s after its last line"
    held = TimedRun(
        tmp_path, [*args, "--exit-teardown"], {"ECHO_NPU_RUNTIME": "teardown_hang"}, timeout=30
    )
    assert held.exit_after > 2 * EXIT_LIMIT, "the normal teardown did not block: no ablation"


@pytest.mark.parametrize("personality", [*PERSONALITIES, ALL])
def test_the_capability_query_answers_within_30_s(tmp_path, personality):
    env = clean_env(
        {"ECHO_NPU_RUNTIME": personality, "ECHO_NPU_DEVICE_LOCK": str(tmp_path / "lock")}
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.profile"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 30, f"{took:.1f} s"
    profile = json.loads(proc.stdout)["profile"]
    assert profile["usable"]["value"] is True, profile["usable"]
    assert profile["fork_safe"]["value"] is True, profile["fork_safe"]
    assert profile["exclusive"]["value"] is ("exclusive" in personality), profile["exclusive"]


def test_the_cuda_proving_ground_says_no_cuda_device_in_one_line():
    """bench/cuda_proving_ground.py on a machine without CUDA: one line, exit status 2."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the script would run for minutes")
    proc = subprocess.run(
        [sys.executable, "bench/cuda_proving_ground.py", "--out", "/nonexistent"],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [
        "no CUDA device: this script needs a machine with a CUDA GPU and its torch"
    ]
