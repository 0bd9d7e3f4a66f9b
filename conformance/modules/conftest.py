"""The module cases of the run's plan (harness/families/modules.py: `core` in a run of every
family, `full` where the command line names conformance/modules alone), a declared missing kernel
as `unsupported`, and the device's red zones checked after each case."""

from __future__ import annotations

import pytest

from conformance.engine.compare import Mismatch
from conformance.engine.memory import MemoryWatch
from conformance.engine.modules.cases import ModuleCase
from conformance.errors import ConformanceUsageError
from conformance.harness.families.base import deselect_empty_parameter_set
from conformance.harness.families.modules import FAMILY, unsupported_skip
from conformance.harness.keyword import kept_params
from conformance.harness.session import run_of

CASE = "module_case"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE not in metafunc.fixturenames:
        return
    try:
        cases = FAMILY.plan(run_of(metafunc.config).suite).cases
    except (ConformanceUsageError, pytest.UsageError) as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    metafunc.parametrize(CASE, kept_params(metafunc, [pytest.param(c, id=str(c)) for c in cases]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No module case at all (a torch without module_db samples): no item either."""
    deselect_empty_parameter_set(config, items, "test_module", CASE, ModuleCase)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """After each case: the device's red zones intact (a module case that corrupted memory
    fails with the backend's record); a missing kernel the manifest declares: unsupported."""
    suite = run_of(item.config).suite
    watch = MemoryWatch(suite.backend)
    try:
        result = yield
    except Exception as exc:
        reason = unsupported_skip(suite, item.nodeid, exc)
        if reason is not None:
            pytest.skip(reason)
        raise
    try:
        watch.check_after(f"module case {item.name}")
    except Mismatch as exc:
        raise AssertionError(f"[{exc.check}] {exc.message}") from None
    return result
