"""Run the scenarios in a subprocess, as a user would."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.helpers import run_pytest


@dataclass
class ScenarioRun:
    returncode: int
    output: str


@pytest.fixture
def run_scenarios():
    """run_scenarios(*pytest_args, env={...}) -> ScenarioRun (pytest's output)."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> ScenarioRun:
        proc = run_pytest(
            "conformance/scenarios",
            "-p",
            "no:cacheprovider",
            "--results",
            "",
            *args,
            env=env,
            timeout=timeout,
        )
        return ScenarioRun(proc.returncode, proc.stdout + proc.stderr)

    return run
