"""The collectives cases: one per case of the run's selection, each run by every rank of its
world and judged against the oracle (engine/collectives/judge.py); the verdict is left on the
item for its record (harness/families/collectives.py)."""

from __future__ import annotations

import pytest

from conformance.engine.collectives.judge import evaluate
from conformance.engine.collectives.spec import CollectiveCase
from conformance.harness.families.collectives import FAMILY, declared_unsupported
from conformance.harness.nodes import leave_verdict
from conformance.harness.session import run_of


def test_collective(
    request: pytest.FixtureRequest, collective_case: CollectiveCase, collective_worlds
):
    if collective_worlds is None:
        plan = FAMILY.plan(run_of(request.config).suite)
        pytest.skip(f"not applicable: {plan.missing or 'no c10d backend (--collectives none)'}")
    verdict = evaluate(collective_worlds, collective_case)
    leave_verdict(request.node, verdict)
    if verdict.status == "skipped":
        pytest.skip(verdict.message)
    if verdict.status == "unimplemented" and declared_unsupported(
        run_of(request.config).suite, request.node.nodeid
    ):
        pytest.skip(f"unsupported (declared): {verdict.message}")
    if verdict.status != "passed":
        pytest.fail(verdict.message, pytrace=False)
