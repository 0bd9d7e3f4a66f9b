"""Run the scenarios in a subprocess, as a user would (like tests/suite/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class ScenarioRun:
    returncode: int
    output: str


@pytest.fixture
def run_scenarios():
    """run_scenarios(*pytest_args, env={...}) -> ScenarioRun (pytest's output)."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> ScenarioRun:
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CONFORMANCE_", "ECHO_NPU_", "PYTEST_XDIST"))
        }
        full_env.update(env or {})
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "conformance/scenarios",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "--results",
            "",
            *args,
        ]
        proc = subprocess.run(
            cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
        )
        return ScenarioRun(proc.returncode, proc.stdout + proc.stderr)

    return run
