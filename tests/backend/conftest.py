"""Fixtures for the echo_npu backend tests: a subprocess runner for import-time settings."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ECHO_NPU_* cleared and then set from ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ECHO_NPU_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def run_py():
    """``run_py(code, **env)`` -> CompletedProcess of a fresh interpreter."""
    return _run
