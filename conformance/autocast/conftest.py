"""The autocast cases of the run's plan (harness/families/autocast.py): one policy case per op
with an autocast kernel on a reference device, and the plan for the contract cases."""

from __future__ import annotations

import pytest

from conformance.harness.families.autocast import FAMILY, AutocastPlan
from conformance.harness.session import run_of

CASE = "autocast_op"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE in metafunc.fixturenames:
        ops = FAMILY.plan(run_of(metafunc.config).suite).ops
        metafunc.parametrize(CASE, [pytest.param(op, id=op) for op in ops])


@pytest.fixture
def autocast_plan(request: pytest.FixtureRequest) -> AutocastPlan:
    """The family's plan; a device torch has no autocast for skips its cases (not applicable)."""
    plan = FAMILY.plan(run_of(request.config).suite)
    if plan.missing is not None:
        pytest.skip(f"not applicable: {plan.missing}")
    return plan
