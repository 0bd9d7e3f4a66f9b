"""Shared by every self-test: pytest's own `pytester` fixture, for tests of the plugin; echo_npu
in-process (`npu`) and its fault switches, always switched off again (`faults`)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def npu():
    """The echo_npu module imported in-process with default settings (malloc mode)."""
    import echo_npu

    return echo_npu


@pytest.fixture
def faults(npu):
    """`faults([...])` sets echo_npu's faults in-process; they are cleared after the test."""
    yield npu.set_faults
    npu.set_faults([])
