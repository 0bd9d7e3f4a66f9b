"""Scenarios against echo_npu switched to behave like other backends: an op the backend lacks
fails a scenario naming the op, as one finding of the kernels the device lacks, until the
manifest declares it (then the scenario is `unsupported`); faults are still caught."""

from __future__ import annotations

import json
import re

from tests.helpers import write_baseline

NO_FALLBACK = {"ECHO_NPU_NO_FALLBACK": "1"}


def test_no_boxed_fallback_fails_scenarios_naming_the_op_until_declared(run_scenarios, tmp_path):
    results = tmp_path / "results"
    run = run_scenarios("--results", str(results), env=NO_FALLBACK)
    assert run.returncode == 1, run.output[-3000:]
    rows = [json.loads(line) for p in results.glob("cases-*.jsonl") for line in p.open()]
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["check"] == "unsupported" for r in failed), failed[:2]
    assert re.match(
        r"\[unsupported\] the device has no kernel for [\w.]+, which this scenario needs",
        failed[0]["message"],
    ), failed[0]["message"]
    # one finding lists the kernels, however many scenarios need them
    assert re.search(r"failing cases = 1 finding", run.output), run.output[-3000:]
    assert "unsupported, not declared:" in run.output
    manifest = tmp_path / "declared.toml"
    text = write_baseline(results, manifest)
    assert 'status = "unsupported"' in text and "scenario:" in text
    declared = run_scenarios("-rs", "--expectations", str(manifest), env=NO_FALLBACK)
    assert declared.returncode == 0, declared.output[-3000:]
    assert re.search(
        r"unsupported: the backend has no kernel for aten::[\w.]+ on 'npu' and no boxed "
        r"fallback takes it \(step: .*declared at ",
        declared.output,
    ), declared.output[-3000:]
    assert not re.search(r"\d+ (failed|error)", declared.output), declared.output[-3000:]


def test_without_fallback_a_leak_still_fails_its_scenario(run_scenarios):
    run = run_scenarios(
        "-k", "mutate_after_use and mul", env={**NO_FALLBACK, "ECHO_NPU_FAULTS": "leak"}
    )
    assert run.returncode == 1, run.output[-3000:]
    assert "::test_mutate_after_use[mul-functional]" in run.output.split("short test summary")[-1]
    assert "allocated by mul.Tensor" in run.output


def test_fork_refusing_device_runs_every_scenario(run_scenarios):
    run = run_scenarios(env={"ECHO_NPU_REFUSE_FORK": "1"})
    assert run.returncode == 0, run.output[-3000:]
    assert not re.search(r"\d+ (failed|error)", run.output), run.output[-3000:]
