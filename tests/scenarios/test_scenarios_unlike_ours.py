"""Scenarios against echo_npu switched to behave like other backends: an op the backend lacks
makes a scenario `unsupported` naming the op (never a failure), and faults are still caught."""

from __future__ import annotations

import re

NO_FALLBACK = {"ECHO_NPU_NO_FALLBACK": "1"}


def test_no_boxed_fallback_makes_scenarios_unsupported_naming_the_op(run_scenarios):
    run = run_scenarios("-rs", env=NO_FALLBACK)
    assert run.returncode == 0, run.output[-3000:]
    assert re.search(
        r"unsupported: the backend has no kernel for aten::[\w.]+ on 'npu' and no boxed "
        r"fallback takes it \(step: ",
        run.output,
    ), run.output[-3000:]
    assert not re.search(r"\d+ (failed|error)", run.output), run.output[-3000:]


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
