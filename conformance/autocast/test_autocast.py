"""The autocast cases: each op's policy on the device against CUDA's (engine/autocast/judge.py;
the verdict is left on the item for its record: harness/families/autocast.py), and what
`torch.autocast` asks of the device module and reports about a region."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.autocast.judge import judge, region_refusal
from conformance.harness.families.autocast import AutocastPlan
from conformance.harness.nodes import leave_verdict


def test_autocast_policy(
    request: pytest.FixtureRequest, autocast_op: str, autocast_plan: AutocastPlan, conformance_suite
):
    assert autocast_plan.lower is not None
    verdict = judge(
        autocast_op,
        conformance_suite.backend.device,
        autocast_plan.lower,
        autocast_plan.key,
        len(autocast_plan.device_kernels),
        autocast_op in autocast_plan.references.get("cuda", {}),
        conformance_suite.cache_dir,
    )
    leave_verdict(request.node, verdict)
    if verdict.message:
        pytest.fail(verdict.message, pytrace=False)
    if not verdict.policies:
        pytest.skip(f"not applicable: no OpInfo sample for {autocast_op} runs on CPU")
    if not verdict.judged:
        pytest.skip(
            "not applicable: CUDA registers no autocast kernel for it (CPU's or XPU's own): "
            "the policy table shows the device's class beside CPU's"
        )


def test_amp_supported_dtype(autocast_plan: AutocastPlan, conformance_suite):
    """torch.autocast(device_type=<a PrivateUse1 device>) asks the device module's
    get_amp_supported_dtype(); the device's autocast dtype is one of them."""
    module = conformance_suite.backend.device_module
    if autocast_plan.key != "AutocastPrivateUse1":
        pytest.skip("not applicable: torch asks get_amp_supported_dtype of PrivateUse1 devices")
    supported = getattr(module, "get_amp_supported_dtype", None)
    if supported is None:  # torch.autocast refuses the device: the policy cases' finding
        pytest.fail(
            _refusal(autocast_plan)
            + f"\n  torch.{autocast_plan.device_type} has no get_amp_supported_dtype()",
            pytrace=False,
        )
    dtypes = list(supported())
    assert autocast_plan.lower in dtypes, (
        f"[autocast] the device's autocast dtype {autocast_plan.lower} is not in "
        f"get_amp_supported_dtype() = {dtypes}"
    )


def test_autocast_region_flags(autocast_plan: AutocastPlan):
    """Inside torch.autocast(device_type=...): is_autocast_enabled and get_autocast_dtype say
    so, for that device only; after it, and in a nested disabled region, autocast is off."""
    dev, lower = autocast_plan.device_type, autocast_plan.lower
    refused = _refusal(autocast_plan)
    if refused:  # the policy cases' finding
        pytest.fail(refused, pytrace=False)
    assert not torch.is_autocast_enabled(dev), f"[autocast] enabled for '{dev}' outside a region"
    with torch.autocast(device_type=dev, dtype=lower):
        assert torch.is_autocast_enabled(dev), f"[autocast] a '{dev}' region is not enabled"
        assert torch.get_autocast_dtype(dev) == lower, "[autocast] the region's dtype is not set"
        assert not torch.is_autocast_enabled("cpu"), "[autocast] the region enabled cpu's too"
        with torch.autocast(device_type=dev, enabled=False):
            assert not torch.is_autocast_enabled(dev), "[autocast] a disabled region is enabled"
        assert torch.is_autocast_enabled(dev), "[autocast] not enabled again after a nested one"
    assert not torch.is_autocast_enabled(dev), f"[autocast] still enabled for '{dev}' after it"


def _refusal(plan: AutocastPlan) -> str:
    """Why torch.autocast refuses the device (the policy cases' own first line), "" if not."""
    assert plan.lower is not None
    return region_refusal(plan.device_type, plan.lower, plan.key, len(plan.device_kernels))
