"""Fixtures of the scenarios, and the device memory check after each scenario."""

from __future__ import annotations

import pytest

from conformance.engine.compare import Mismatch
from conformance.engine.memory import MemoryWatch
from conformance.harness.session import run_of
from conformance.scenarios._helpers import last_step, reset_steps


@pytest.fixture
def device(conformance_suite):
    """The device of the backend the suite is pointed at."""
    return conformance_suite.backend.device


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """After each scenario: red zones intact and no device block leaked, else the scenario fails
    with the backend's record (allocating op, the op after which corruption was first seen) and
    the scenario's last step."""
    backend = run_of(item.config).suite.backend
    watch = MemoryWatch(backend)
    reset_steps()
    try:
        result = yield
    except BaseException as exc:
        problem = _memory_problem(watch, item, leaks=False)
        if problem and hasattr(exc, "add_note"):
            exc.add_note(problem)
        raise
    problem = _memory_problem(watch, item, leaks=True)
    if problem:
        raise AssertionError(problem)
    return result


def _memory_problem(watch: MemoryWatch, item: pytest.Item, leaks: bool) -> str | None:
    where = f"scenario {item.name}" + (f" (last step: {last_step()})" if last_step() else "")
    try:
        watch.check_after(where)
        if leaks:
            watch.check_leaks(where)
    except Mismatch as exc:
        return f"[{exc.check}] {exc.message}"
    return None
