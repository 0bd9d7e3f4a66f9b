"""The module cases: one per case of the run's plan, torch's ModuleInfo sample run on CPU and on
the device and compared (engine/modules/judge.py); where a value differed, the first op that
diverged is searched in this process's search child (engine/modules/divergence.py); the verdict
is left on the item for its record (harness/families/modules.py)."""

from __future__ import annotations

import pytest

from conformance.engine import oracles
from conformance.engine.modules.cases import ModuleCase
from conformance.engine.modules.divergence import SearchChild
from conformance.engine.modules.judge import NotComparable, judge
from conformance.harness.families.modules import op_scales
from conformance.harness.nodes import leave_verdict


@pytest.fixture(scope="session")
def divergence_searches():
    """This process's search children for the op that diverged, by (backend, device): each
    started at its first search, closed at the session's end."""
    children: dict[tuple[str, str], SearchChild] = {}
    yield children
    for child in children.values():
        child.close()


def test_module(
    request: pytest.FixtureRequest,
    module_case: ModuleCase,
    conformance_suite,
    divergence_searches: dict[tuple[str, str], SearchChild],
):
    backend = conformance_suite.backend
    oracles.use_seeding(backend.seed_generators)  # as the op cases seed (engine/oracles.py)
    try:
        verdict = judge(module_case, backend.device, conformance_suite.cache_dir)
    except NotComparable as exc:
        pytest.skip(f"not applicable: {exc}")
    if verdict.searched:  # after the verdict, in a child: its crash is never the case's
        key = (backend.spec, backend.device_type)
        if key not in divergence_searches:
            cache = conformance_suite.cache_dir
            divergence_searches[key] = SearchChild(*key, op_scales(), cache)
        child = divergence_searches[key]
        verdict.diverged = child.search(str(module_case))
    leave_verdict(request.node, verdict)
    if verdict.check is not None:
        pytest.fail(verdict.message, pytrace=False)
