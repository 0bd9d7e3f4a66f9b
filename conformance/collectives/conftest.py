"""Fixtures of the collectives cases: the cases of the run's plan (`--collectives`,
`--collectives-set`, `--world-sizes`) and the worlds of rank processes of this process (started
on first use, reused by every case that runs here, stopped at the end)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.engine.collectives.spec import CollectiveCase
from conformance.engine.collectives.world import Setup, Worlds
from conformance.errors import ConformanceUsageError
from conformance.harness.families.base import deselect_empty_parameter_set
from conformance.harness.families.collectives import FAMILY
from conformance.harness.families.collectives_plan import CollectivesPlan
from conformance.harness.keyword import kept_params
from conformance.harness.session import run_of

CASE = "collective_case"


def _plan(config: pytest.Config) -> CollectivesPlan:
    return FAMILY.plan(run_of(config).suite)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE not in metafunc.fixturenames:
        return
    try:
        cases = _plan(metafunc.config).cases()
    except (ConformanceUsageError, pytest.UsageError) as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    metafunc.parametrize(CASE, kept_params(metafunc, [pytest.param(c, id=str(c)) for c in cases]))


@pytest.fixture(scope="session")
def collective_worlds(request: pytest.FixtureRequest) -> Iterator[Worlds | None]:
    """The worlds of this process (None: the family judges nothing in this run)."""
    plan = _plan(request.config)
    if plan.c10d is None or plan.missing is not None:
        yield None
        return
    worlds = Worlds(Setup(plan.c10d, plan.device, plan.backend, plan.timeout))
    try:
        yield worlds
    finally:
        worlds.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No collectives case at all (`--collectives none`): no item either."""
    deselect_empty_parameter_set(config, items, "test_collective", CASE, CollectiveCase)
