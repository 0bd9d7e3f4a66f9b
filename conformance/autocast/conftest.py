"""The autocast cases of the run's plan (harness/families/autocast.py): one policy case per op
with an autocast kernel on a reference device, and the plan for the contract cases."""

from __future__ import annotations

import pytest

from conformance.harness.families.autocast import FAMILY, AutocastPlan
from conformance.harness.families.base import deselect_empty_parameter_set
from conformance.harness.keyword import kept_params
from conformance.harness.session import run_of

CASE = "autocast_op"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE in metafunc.fixturenames:
        ops = FAMILY.plan(run_of(metafunc.config).suite).ops
        metafunc.parametrize(CASE, kept_params(metafunc, [pytest.param(op, id=op) for op in ops]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No policy case left (-k kept none): no `[NOTSET]` item either."""
    deselect_empty_parameter_set(config, items, "test_autocast_policy", CASE, str)


@pytest.fixture
def autocast_plan(request: pytest.FixtureRequest) -> AutocastPlan:
    """The family's plan; a device torch has no autocast for skips its cases (not applicable)."""
    plan = FAMILY.plan(run_of(request.config).suite)
    if plan.missing is not None:
        pytest.skip(f"not applicable: {plan.missing}")
    return plan
