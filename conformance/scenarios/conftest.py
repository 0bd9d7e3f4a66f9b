"""Fixtures of the scenarios, the device memory check after each scenario, and `unsupported`
for a scenario that needs an op the backend lacks (no kernel and no boxed fallback) when the
manifest declares it."""

from __future__ import annotations

import pytest

from conformance.engine.compare import Mismatch
from conformance.engine.memory import MemoryWatch
from conformance.harness.families.scenarios import scenario_key
from conformance.harness.session import run_of
from conformance.scenarios._helpers import last_step, missing_op, reset_steps


def _unsupported(item: pytest.Item, exc: BaseException) -> None:
    """Skip as `unsupported`, naming the op, when the backend lacks an op the scenario needs and
    the expectations manifest declares the scenario unsupported (`scenario:<name>`); undeclared,
    the scenario fails on the dispatcher's error (the harness names the missing kernel)."""
    suite = run_of(item.config).suite
    backend = suite.backend
    op = missing_op(exc, backend.device_type)
    entry = suite.expectations.family_expectation(scenario_key(item.nodeid))
    if op is not None and entry is not None and entry.status == "unsupported":
        step = f" (step: {last_step()})" if last_step() else ""
        pytest.skip(
            f"unsupported: the backend has no kernel for {op} on '{backend.device_type}' and no "
            f"boxed fallback takes it{step}; declared at {entry.source}"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """A fixture that needs a missing op (e.g. moving a model to the device) is unsupported too."""
    try:
        return (yield)
    except Exception as exc:
        _unsupported(item, exc)
        raise


@pytest.fixture
def compile_mode_only(request):
    """For compiled-path scenarios that build C++ (minutes): only `--modes compile` runs them."""
    if "compile" not in run_of(request.config).suite.options.modes:
        pytest.skip("compiled-path scenario (Inductor builds C++): --modes compile runs it")


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
        elif isinstance(exc, Exception):  # corrupted memory wins over a missing op
            _unsupported(item, exc)
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
