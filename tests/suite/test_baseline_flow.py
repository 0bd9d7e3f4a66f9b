"""The first week with a backend (issue 23): a run with two faults writes a baseline manifest
(--write-expectations, under xdist: the controller writes it), the next run with it is green, a
fixed bug turns it red with "remove this entry", and a kernel that drops a dtype turns it red
(`unsupported` fails unless declared)."""

from __future__ import annotations

import pytest

from conformance.harness.expectations import load_manifest

# slow: four runs of the suite in a row
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

echo_npu = pytest.importorskip("echo_npu")

# leak: mul.Tensor leaks a block; nan_to_zero: relu turns NaN into 0 (its -special cases);
# fill_no_half: fill_.Scalar raises NotImplementedError for float16 where CPU computes
ARGS = ("--ops", "mul.Tensor,relu,fill_.Scalar", "--dtypes", "float32,float16")
ARGS += ("--layouts", "contiguous", "--paths", "native")


def _statuses(run) -> dict[str, str]:
    return {r["id"].split("[")[1].rstrip("]"): r["status"] for r in run.results}


def test_baseline_then_green_then_red_for_a_fixed_bug_and_a_dropped_dtype(run_suite, tmp_path):
    for fault in ("leak", "nan_to_zero", "fill_no_half"):
        if fault not in echo_npu.fault_names():
            pytest.skip(f"echo_npu has no fault {fault!r}")
    manifest = tmp_path / "my_npu.toml"
    faults = {"ECHO_NPU_FAULTS": "leak,nan_to_zero"}
    first = run_suite(*ARGS, "-n", "2", "--write-expectations", str(manifest), env=faults)
    assert first.returncode == 1 and manifest.is_file(), first.output[-3000:]
    assert f"wrote {manifest} (2 finding(s), 0 unsupported group(s)" in first.output
    entries = load_manifest([str(manifest)]).entries
    assert sorted(e.checks for e in entries) == [("leak",), ("values",)], entries
    assert all(e.status == "xfail" and e.category == "backend-bug" for e in entries)
    failed = {c for c, s in _statuses(first).items() if s == "failed"}
    assert failed and all(any(e.matching(c) for e in entries) for c in failed)

    second = run_suite(*ARGS, "--expectations", str(manifest), env=faults)
    assert second.returncode == 0, second.output[-3000:]
    assert {c for c, s in _statuses(second).items() if s == "xfailed"} == failed
    assert "0 failing cases = 0 finding(s)" in second.output

    # nan_to_zero fixed, fill_.Scalar loses float16
    third = run_suite(
        *ARGS, "--expectations", str(manifest), env={"ECHO_NPU_FAULTS": "leak,fill_no_half"}
    )
    assert third.returncode == 1
    statuses = _statuses(third)
    fixed = [c for c in failed if c.startswith("relu")]
    assert fixed and {statuses[c] for c in fixed} == {"xpassed"}
    assert "passes now; remove this entry" in third.output
    dropped = third.case("fill_.Scalar-float16-contiguous-native")
    assert dropped["status"] == "failed" and dropped["check"] == "unsupported", dropped
    assert "NotImplementedError" in dropped["message"] and "not declared" in dropped["message"]
    assert third.case("fill_.Scalar-float32-contiguous-native")["status"] == "passed"
