"""Helpers shared by the self-tests: run pytest in a subprocess as a user would."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.launcher import Launcher, same_process

REPO = Path(__file__).resolve().parents[1]
# variables a user's shell may carry that would change what a self-test's run does
CLEARED_PREFIXES = ("CONFORMANCE_", "ECHO_NPU_", "PYTEST_XDIST")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """os.environ without the suite's, echo_npu's and xdist's variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLEARED_PREFIXES)}
    env.update(extra or {})
    return env


def run_pytest(
    *args: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """`python -m pytest -q -p no:randomly <args>` from the repository root: forked by this
    process's warm launcher where that is the same process as a fresh interpreter
    (tests/launcher.py), else a fresh interpreter."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args]
    env = clean_env(env)
    warm = WARM_RUNS.run(cmd, env, timeout)
    if warm is not None:
        return warm
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


class WarmRuns:
    """This test process's warm launcher (tests/launcher.py), started at its first run, started
    again if it ended; off with SELFTEST_COLD_RUNS=1 (every run a fresh interpreter)."""

    def __init__(self) -> None:
        self.launcher: Launcher | None = None

    def run(
        self, cmd: list[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess | None:
        """The run's result, or None where it must be a fresh interpreter."""
        if os.environ.get(COLD_RUNS) == "1":
            return None
        try:
            if self.launcher is None or not self.launcher.alive():
                self.launcher = Launcher(clean_env())
        except (OSError, TimeoutError):
            self.launcher = None
            return None  # no launcher here: fresh interpreters
        if not same_process(env, self.launcher.env):
            return None
        with tempfile.TemporaryDirectory(prefix="selftest-run-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            try:
                code = self.launcher.run(cmd[3:], env, out, err, timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired(cmd, timeout) from None
            except OSError:  # the launcher ended under this run: it runs afresh
                return None
            return subprocess.CompletedProcess(
                cmd, code, out.read_text(errors="replace"), err.read_text(errors="replace")
            )


#: set to 1: every run_pytest is a fresh interpreter (to compare, or to rule the launcher out)
COLD_RUNS = "SELFTEST_COLD_RUNS"
WARM_RUNS = WarmRuns()


def write_baseline(results: Path, manifest: Path) -> str:
    """`python -m conformance.measure.baseline RESULTS -o MANIFEST`; the manifest's text."""
    subprocess.run(
        [sys.executable, "-m", "conformance.measure.baseline", str(results), "-o", str(manifest)],
        check=True,
        env=clean_env(),
        capture_output=True,
    )
    return manifest.read_text()


def once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]) -> Any:
    """`make(folder)` computed once for every xdist worker of this pytest run, as pytest-xdist's
    documentation shows for fixtures that must run once: a file lock in the temporary root the
    workers share; the others read the pickled result (a module fixture of an expensive run of
    the suite was computed by each worker that got one of its tests). Without xdist: once."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(factory.mktemp(name))
    root = factory.getbasetemp().parent  # the run's root, shared by its workers
    done = root / f"{name}.pickle"
    with FileLock(str(done) + ".lock"):
        if done.exists():
            return pickle.loads(done.read_bytes())
        folder = root / name
        folder.mkdir()
        result = make(folder)
        done.write_bytes(pickle.dumps(result))
        return result
