"""The default run sees what a backend runs through its boxed fallback, and the values axis sees
kernels that mishandle NaN or type promotion: a fault planted in echo_npu fails the default run
in the case that names the wrong op, with the right check, and the same cases pass without it.

One process each (no xdist: tests/suite/test_catches_faults.py and others run the same cases under
it): a run of a few cases with `-n 2` costs nine CPU seconds of worker start-up more.
"""

from __future__ import annotations

import pytest

# fault: (-k expression, case that must fail, check, text in its message)
FAULTS = {
    "fallback_addmm_drops_bias": (
        "addmm and float32 and contiguous",
        "addmm.out-float32-contiguous-fallback",
        "values",
        "elements differ",
    ),
    "nan_to_zero": (
        "where and float32 and contiguous and native",
        "where.self-float32-contiguous-native-special",
        "values",
        "vs cpu nan",
    ),
    "mm_nan_to_zero": (
        "mm and float32 and contiguous and native",
        "mm-float32-contiguous-native-special",
        "values",
        "vs cpu nan",
    ),
    "tril_negative_diagonal": (
        "tril and float32 and contiguous and native",
        "tril-float32-contiguous-native",
        "values",
        "elements differ",
    ),
    "index_select_strided_as_contiguous": (
        "index_select and float32 and contiguous and native",
        "index_select-float32-noncontiguous-native",
        "values",
        "elements differ",
    ),
    "int_float_promotion": (
        "add.Tensor and int64 and contiguous and native",
        "add.Tensor-int64-contiguous-native-promotion",
        "dtype",
        "cpu gives torch.float32",
    ),
}


def _require(fault: str) -> None:
    import echo_npu

    if fault not in echo_npu.fault_names():
        pytest.skip(f"this echo_npu build has no fault {fault!r} (backend branch not merged)")


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_default_run_catches_the_fault_in_the_right_case(run_suite, fault):
    _require(fault)
    keyword, case, check, text = FAULTS[fault]
    clean = run_suite("-k", keyword)
    assert clean.returncode == 0, clean.output[-3000:]
    assert clean.case(case)["status"] == "passed"

    run = run_suite("-k", keyword, env={"ECHO_NPU_FAULTS": fault})
    assert run.returncode == 1, run.output[-3000:]
    row = run.case(case)
    assert row["status"] == "failed" and row["check"] == check, row
    assert text in row["message"], row["message"]
    # the failures name only the faulty op
    failed_ops = {r["op"] for r in run.failed()}
    assert failed_ops == {case.split("-")[0].split(".")[0]}, failed_ops


def test_fallback_fault_fails_only_the_fallback_path(run_suite):
    _require("fallback_addmm_drops_bias")
    run = run_suite("-k", "addmm", env={"ECHO_NPU_FAULTS": "fallback_addmm_drops_bias"})
    failed = run.failed()
    assert failed and {r["path"] for r in failed} == {"fallback"}
    assert {r["op"] + "." + r["overload"] for r in failed} == {"addmm.out"}
