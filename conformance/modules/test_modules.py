"""The module cases: one per case of the run's plan, torch's ModuleInfo sample run on CPU and on
the device and compared (engine/modules/judge.py); where a value differed, the first op that
diverged is searched in a child process (engine/modules/divergence.py); the verdict is left on
the item for its record (harness/families/modules.py)."""

from __future__ import annotations

import pytest

from conformance.engine import oracles
from conformance.engine.modules.cases import ModuleCase
from conformance.engine.modules.divergence import ChildSearches
from conformance.engine.modules.judge import NotComparable, judge


@pytest.fixture(scope="session")
def divergence_searches() -> ChildSearches:
    """The searches for the op that diverged this process makes (each in a child)."""
    return ChildSearches()


def test_module(
    request: pytest.FixtureRequest,
    module_case: ModuleCase,
    conformance_suite,
    divergence_searches: ChildSearches,
):
    backend = conformance_suite.backend
    oracles.use_seeding(backend.seed_generators)  # as the op cases seed (engine/oracles.py)
    try:
        verdict = judge(module_case, backend.device)
    except NotComparable as exc:
        pytest.skip(f"not applicable: {exc}")
    if verdict.searched:  # after the verdict, in a child: its crash is never the case's
        verdict.diverged = divergence_searches.search(
            str(module_case), backend.spec, backend.device_type
        )
    request.node.module_verdict = verdict
    if verdict.check is not None:
        pytest.fail(verdict.message, pytrace=False)
