"""Scenario outcomes are results like the op cases (cases-*.jsonl, run.json findings), and the
mismatched-inputs scenarios judge error classes: a missing kernel is never 'raised like CPU'."""

from __future__ import annotations

import json

import pytest

from conformance.engine.errorclass import DEVICE, NOT_IMPLEMENTED, classify, same_class
from tests.helpers import run_pytest

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


def test_scenario_outcomes_are_recorded_with_findings(tmp_path):
    results = tmp_path / "results"
    proc = run_pytest(
        "conformance/scenarios",
        "-k",
        "mutate_after_use or cpu_scalar_tensor",
        "--results",
        str(results),
        env={"ECHO_NPU_FAULTS": "inplace_returns_new"},
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    rows = [
        json.loads(x) for f in results.glob("cases-*.jsonl") for x in f.read_text().split("\n") if x
    ]
    assert rows and {r["path"] for r in rows} == {"scenario"}
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["check"] == "scenario" and r["message"] for r in failed)
    assert any(r["status"] == "passed" for r in rows)
    findings = json.loads((results / "run.json").read_text())["findings"]
    assert sum(f["count"] for f in findings) == len(failed)
    assert "failing cases =" in proc.stdout


def test_a_scenario_broken_by_a_broken_copy_is_blocked_by_it(tmp_path):
    results = tmp_path / "results"
    proc = run_pytest(
        "conformance/scenarios",
        "-k",
        "save_load",
        "--results",
        str(results),
        env={"ECHO_NPU_FAULTS": "d2h_ignores_offset"},
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    rows = [
        json.loads(x) for f in results.glob("cases-*.jsonl") for x in f.read_text().split("\n") if x
    ]
    bad = [r for r in rows if r["status"] not in ("passed", "skipped")]
    assert bad and {r["status"] for r in bad} == {"blocked"}
    assert all(r["blocked_by"].startswith("_copy_from-float32-") for r in bad)
    assert "[blocked] blocked by _copy_from-float32-" in bad[0]["message"]
    assert f"{len(bad)} failing cases = 1 finding" in proc.stdout
