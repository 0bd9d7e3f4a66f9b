"""Issue 43: the kernels real NPUs ship wrong at sizes and argument values OpInfo's small samples
never take fail the suite, each as one finding naming the op and the size or argument, and
echo_npu without them passes the same cases.

- `sum_bf16_tiles` (bfloat16 sum accumulated across float32 tiles of 16 in bfloat16), caught
  at 65,537 reduced elements by a -sizes case;
- `exp_skips_tail` (a pointwise kernel whose vector path skips the tail past 1,024 elements),
  caught at 4,097 elements by the -sizes cases;
- `cumsum_carry` (a block scan whose carry is wrong past 1,024 elements), caught at 1,025;
- `fallback_nll_mean_by_n` (a weighted mean divided by N), caught by the -arguments case that
  makes reduction = mean from a sample with a weight;
- `sqrt_ulp` (sqrt 1 ulp off on every 8th element), caught as `rounding` in every float dtype
  (IEEE requires sqrt correctly rounded: CPU's bits or the correctly rounded ones);
- a Python-registered `normal_` drawing with std x 1.1 (the run names it `normal_`, and the
  parametric oracle finds its model under that name).
"""

from __future__ import annotations

from pathlib import Path

import pytest

FLOATS = ("float32", "float64", "float16", "bfloat16")
BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
# fault: (suite arguments, value set of every failing case, text each failure names, check)
FAULTS = {
    "sum_bf16_tiles": (("--ops", "sum.dim_IntList", "--dtypes", "bfloat16"), "sizes", "[65537]"),
    "exp_skips_tail": (("--ops", "exp", "--dtypes", "float32,int32"), "sizes", "[4097]"),
    "cumsum_carry": (("--ops", "cumsum", "--dtypes", "float32,int64"), "sizes", "1025"),
    "fallback_nll_mean_by_n": (
        ("-k", "nll_loss_forward.output", "--dtypes", "float32,float64"),
        "arguments",
        "reduction=mean",
    ),
}
CONTIGUOUS = ("--layouts", "contiguous")


def _one_finding(run, op: str) -> dict:
    findings = run.info["findings"]
    assert len(findings) == 1, findings
    assert any(o.startswith(op) for o in findings[0]["ops"]), findings[0]
    return findings[0]


def test_echo_npu_without_faults_passes_the_sizes_arguments_and_models_cases(run_suite):
    run = run_suite(
        "--ops", "sum.dim_IntList,exp,cumsum,sqrt,add_.Tensor", *CONTIGUOUS, "-n", "2"
    )  # fmt: skip
    assert run.returncode == 0 and not run.failed(), run.output
    passed = {r["id"] for r in run.results if r["status"] == "passed"}
    for case in (
        "sum.dim_IntList-bfloat16-contiguous-native-sizes",
        "exp-float32-contiguous-native-sizes",
        "cumsum-float32-contiguous-native-sizes",
        "sum.dim_IntList-float32-contiguous-native-arguments",
        # an optimizer's add_(grad, alpha=-lr) in half precision: CPU fuses the multiply-add,
        # echo_npu rounds twice; both right, judged by CPU's own error (engine/evidence.py)
        "add_.Tensor-float16-contiguous-native-models",
    ):
        assert f"test_matches_cpu[{case}]" in passed, case


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_at_size_or_argument_fails_as_one_finding_naming_it(run_suite, fault):
    args, value_set, text = FAULTS[fault]
    run = run_suite(*args, *CONTIGUOUS, env={"ECHO_NPU_FAULTS": fault})
    assert run.returncode == 1, run.output
    failed = run.failed()
    assert failed and all(r["id"].endswith(f"-{value_set}]") for r in failed), failed
    assert all(text in r["message"] for r in failed), [r["message"] for r in failed]
    op = failed[0]["op"]
    _one_finding(run, op)


def test_sqrt_one_ulp_off_fails_every_float_dtype_as_rounding(run_suite):
    args = ("--ops", "sqrt", "--dtypes", ",".join(FLOATS), *CONTIGUOUS, "--paths", "native")
    run = run_suite(*args, "--values", "ordinary", env={"ECHO_NPU_FAULTS": "sqrt_ulp"})
    for dtype in FLOATS:
        row = run.case(f"sqrt-{dtype}-contiguous-native")
        assert row["status"] == "failed" and row["check"] == "rounding", row
    message = run.case("sqrt-float32-contiguous-native")["message"]
    assert "not cpu's correctly rounded result" in message, message


def test_a_python_normal_with_its_spread_ten_percent_wide_fails(run_suite):
    args = ("--backend", "wide_normal_backend", "--ops", "normal_", *CONTIGUOUS)
    args += ("--dtypes", "float32", "--values", "ordinary")
    wide = run_suite(*args, env={"PYTHONPATH": BACKENDS})
    row = wide.case("normal_-float32-contiguous-native")
    assert row["status"] == "failed" and "standardised variance" in row["message"], row
    right = run_suite(*args, env={"PYTHONPATH": BACKENDS, "WIDE_NORMAL_FACTOR": "1.0"})
    assert right.case("normal_-float32-contiguous-native")["status"] == "passed", right.output
