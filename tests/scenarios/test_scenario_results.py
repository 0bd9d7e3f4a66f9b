"""Scenario outcomes are results like the op cases (cases-*.jsonl, run.json findings), and the
mismatched-inputs scenarios judge error classes: a missing kernel is never 'raised like CPU'."""

from __future__ import annotations

import json

import pytest

from conformance.engine.errorclass import DEVICE, NOT_IMPLEMENTED, classify, same_class
from tests.helpers import run_pytest

echo_npu = pytest.importorskip("echo_npu")

DISPATCHER = (
    "Could not run 'aten::add.Tensor' with arguments from the 'NPU' backend. This could be "
    "because the operator doesn't exist for this backend. 'aten::add.Tensor' is only available "
    "for these backends: [CPU, Meta, ...]"
)


def test_a_missing_kernel_is_not_a_device_error_even_if_it_names_cpu():
    got = classify(RuntimeError(DISPATCHER))
    assert got.kind == NOT_IMPLEMENTED and got.kind != DEVICE
    assert not same_class(classify(RuntimeError("The size of tensor a (3) must match")), got)
    assert classify(NotImplementedError("no kernel")).kind == NOT_IMPLEMENTED


@pytest.mark.parametrize(
    "cpu, device, same",
    [
        (
            "result type Float can't be cast to the desired output type Long",
            "Promotion of int.add/sub_(float) in in-place ops are not possible",
            True,
        ),
        (
            "The size of tensor a (3) must match the size of tensor b (4)",
            "shapes [2, 3] and [4] cannot be broadcast",
            True,
        ),
        (
            "Expected all tensors to be on the same device, but found at least two devices",
            "The size of tensor a (3) must match the size of tensor b (4)",
            False,
        ),
    ],
)
def test_error_classes(cpu, device, same):
    assert same_class(classify(RuntimeError(cpu)), classify(RuntimeError(device))) is same


def run_scenarios(tmp_path, keyword: str, fault: str):
    """Run the scenarios matching `keyword` with an echo_npu fault: (process, rows, run.json)."""
    results = tmp_path / "results"
    proc = run_pytest(
        "conformance/scenarios",
        "-k",
        keyword,
        "--results",
        str(results),
        env={"ECHO_NPU_FAULTS": fault},
    )
    rows = [
        json.loads(x) for f in results.glob("cases-*.jsonl") for x in f.read_text().split("\n") if x
    ]
    run_json = results / "run.json"
    return proc, rows, json.loads(run_json.read_text()) if run_json.exists() else {}


def test_scenario_outcomes_are_recorded_with_findings(tmp_path):
    proc, rows, info = run_scenarios(
        tmp_path, "mutate_after_use or cpu_scalar_tensor", "inplace_returns_new"
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert rows and {r["path"] for r in rows} == {"scenario"}
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["check"] == "scenario" and r["message"] for r in failed)
    assert any(r["status"] == "passed" for r in rows)
    findings = info["findings"]
    assert sum(f["count"] for f in findings) == len(failed)
    assert "failing cases =" in proc.stdout


def test_a_scenario_with_a_broken_view_copy_fails_on_its_own_and_names_it(tmp_path):
    """Scenarios are blocked only by what every scenario uses (the contiguous round trip): a
    broken copy of offset views might be related and is named, but it does not hide the
    scenario's own failure (issue 20: any broken copy used to block every scenario)."""
    proc, rows, info = run_scenarios(tmp_path, "save_load", "d2h_ignores_offset")
    assert proc.returncode == 1, proc.stdout[-3000:]
    bad = [r for r in rows if r["status"] not in ("passed", "skipped")]
    assert bad and {r["status"] for r in bad} == {"failed"}
    assert all(r["related_foundation"].startswith("_copy_from-float32-") for r in bad)
    assert "might be related: _copy_from-float32-" in bad[0]["message"]
    findings = info["findings"]
    assert findings and findings[0]["related"][0].startswith("_copy_from-float32-")


def test_a_scenario_is_blocked_when_the_round_trip_is_broken(tmp_path):
    """Every scenario reads its results back through the contiguous round trip: when that is
    broken, a failing scenario is blocked by it."""
    if "d2h_drops_last" not in echo_npu.fault_names():
        pytest.skip("this build of echo_npu has no d2h_drops_last fault")
    proc, rows, _ = run_scenarios(tmp_path, "save_load", "d2h_drops_last")
    bad = [r for r in rows if r["status"] not in ("passed", "skipped")]
    assert bad and {r["status"] for r in bad} == {"blocked"}, proc.stdout[-3000:]
    assert all(r["blocked_by"] == "_copy_from-float32-contiguous-native" for r in bad)
