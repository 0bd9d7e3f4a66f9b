"""The module cases: one per case of the run's plan, torch's ModuleInfo sample run on CPU and on
the device and compared (engine/modules/judge.py); the verdict is left on the item for its record
(harness/families/modules.py)."""

from __future__ import annotations

import pytest

from conformance.engine.modules.cases import ModuleCase
from conformance.engine.modules.judge import NotComparable, judge


def test_module(request: pytest.FixtureRequest, module_case: ModuleCase, conformance_suite):
    try:
        verdict = judge(module_case, conformance_suite.backend.device)
    except NotComparable as exc:
        pytest.skip(f"not applicable: {exc}")
    request.node.module_verdict = verdict
    if verdict.check is not None:
        pytest.fail(verdict.message, pytrace=False)
