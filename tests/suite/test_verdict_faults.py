"""Each fault of echo_npu is reported where it is, once: the right case first, with the right
check and message; cases that only depend on a broken foundation say 'blocked by' it; a missing
kernel is `unsupported`, never a pass. Faults this build of echo_npu lacks are skipped."""

from __future__ import annotations

import json
import re

import pytest

echo_npu = pytest.importorskip("echo_npu")

COPY_OPS = "_copy_from*,as_strided,view,_reshape_alias,abs,add.Tensor,sum.dim_IntList"


def needs(fault: str) -> None:
    if fault not in echo_npu.fault_names():
        pytest.skip(f"echo_npu has no fault {fault!r} yet")


def run_json(run) -> dict:
    path = re.search(r"per-case results in (\S+)", run.output)
    assert path, run.output[-2000:]
    with open(path.group(1).rstrip("/") + "/run.json") as f:
        return json.load(f)


def needs_values_axis(run, values: str) -> None:
    """int+float and NaN inputs come from the values axis (cases `...-promotion`/`...-special`)."""
    if not any(r.get("values") == values for r in run.results):
        pytest.skip(f"no '{values}' cases in this suite yet (the values axis of case generation)")


def failing(run) -> list[dict]:
    return [r for r in run.results if r["status"] in ("failed", "blocked", "crashed", "error")]


@pytest.mark.parametrize("fault", ["d2h_ignores_offset", "copy_ignores_offset"])
def test_an_offset_copy_bug_is_one_finding_named_copy_from(run_suite, fault):
    needs(fault)
    args = ["--ops", COPY_OPS, "--dtypes", "float32", "--isolate", "none"]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": fault})
    assert run.returncode == 1
    bad = failing(run)
    assert bad and "_copy_from" in bad[0]["id"], bad[0]  # in execution order: the root first
    for row in bad:
        assert "_copy_from" in row["id"] or (row["blocked_by"] or "").startswith("_copy_from-")
        if row["status"] == "blocked":
            assert "blocked by _copy_from-float32-" in row["message"]
    views = [r for r in run.results if r["op"] in ("view", "as_strided", "_reshape_alias")]
    assert views and {r["status"] for r in views} <= {"passed", "skipped"}
    findings = run_json(run)["findings"]
    assert len(findings) == 1 and findings[0]["title"].startswith("_copy_from is broken")
    assert findings[0]["count"] == len(bad)
    assert re.search(rf"{len(bad)} failing cases = 1 finding", run.output)


def test_resize_that_loses_data_fails_resize(run_suite):
    needs("resize_loses_data")
    args = ["--ops", "resize_", "--dtypes", "float32", "--layouts", "contiguous"]
    assert run_suite(*args).returncode == 0
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "resize_loses_data"})
    row = run.case("resize_-float32-contiguous-native")
    assert row["status"] == "failed" and row["check"] == "values", row
    assert "resize_ lost the old contents of self" in row["message"]


@pytest.mark.parametrize(
    ("case", "declared", "cpu_raises"),
    [
        ("exp_-int64-contiguous-native", False, True),  # cpu: dtype error; used to pass, then skip
        ("div_.Tensor-int64-contiguous-native", False, True),
        ("exp_-int64-contiguous-native", True, True),
        ("exp-int64-contiguous-native", False, False),  # cpu computes
        ("exp-int64-contiguous-native", True, False),
    ],
)
def test_a_missing_kernel_is_unsupported_never_a_pass(
    run_suite, tmp_path, case, declared, cpu_raises
):
    """A device "not implemented" fails the case unless the manifest declares it (here the one
    line for a device without a dtype): where CPU computes (tests/suite/test_baseline_flow.py),
    and where CPU raises another error (an error-input sample: error parity, issue 32; it used
    to be `unsupported` even when undeclared)."""
    needs("int_not_implemented")
    op = case.split("-")[0]
    args = ["--ops", op, "--dtypes", "int64,float32", "--layouts", "contiguous"]
    if declared:
        manifest = tmp_path / "m.toml"
        manifest.write_text('unsupported_dtypes = ["int64"]\n')
        args += ["--expectations", str(manifest)]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "int_not_implemented"})
    row = run.case(case)
    assert "NotImplementedError" in row["message"]
    assert run.case(case.replace("int64", "float32"))["status"] == "passed"
    if declared:
        assert run.returncode == 0, run.output[-3000:]  # a declared missing kernel
        assert row["status"] == "unsupported" and row.get("unsupported_dtype"), row
        assert re.search(r"unsupported, declared by the manifest: \d+ case", run.output)
        return
    assert run.returncode == 1 and row["status"] == "failed", row
    assert row["check"] == "unsupported" and "not declared" in row["message"]
    assert ("error parity" in row["message"]) == cpu_raises, row["message"]


def test_fill_without_half_does_not_blame_views(run_suite):
    needs("fill_no_half")
    args = ["--ops", "fill_.Scalar,view,as_strided", "--dtypes", "float16", "--paths", "native"]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "fill_no_half"})
    row = run.case("fill_.Scalar-float16-contiguous-native")
    assert row["status"] in ("unsupported", "failed"), row
    others = [r for r in run.results if r["op"] != "fill_"]
    assert others and {r["status"] for r in others} <= {"passed", "skipped"}, others


def test_integer_plus_float_promotion_is_a_dtype_failure(run_suite):
    needs("int_float_promotion")
    args = ["--ops", "add.Tensor", "--dtypes", "int64", "--paths", "native"]
    assert run_suite(*args).returncode == 0
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "int_float_promotion"})
    needs_values_axis(run, "promotion")
    bad = failing(run)
    assert bad and {r["check"] for r in bad} == {"dtype"}, bad
    assert "int64" in bad[0]["message"] and "float" in bad[0]["message"]
    assert len(run_json(run)["findings"]) == 1


@pytest.mark.parametrize("op", ["where.self", "relu"])
def test_nan_mishandled_is_a_values_failure(run_suite, op):
    needs("nan_to_zero")
    args = ["--ops", op, "--dtypes", "float32", "--paths", "native"]
    assert run_suite(*args).returncode == 0
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "nan_to_zero"})
    needs_values_axis(run, "special")
    bad = failing(run)
    assert bad and {r["check"] for r in bad} == {"values"}, bad
    assert "nan" in bad[0]["message"].lower()


def test_an_unrelated_broken_copy_does_not_hide_a_second_bug(run_suite):
    """With the bias bug of addmm's fallback and a broken offset copy both on, addmm.out on the
    contiguous layout fails on its own, as without the copy fault: its sample used no offset
    copy, so the copy finding only says it might be related (issue 20)."""
    needs("fallback_addmm_drops_bias")
    needs("d2h_ignores_offset")
    case = "addmm.out-float32-contiguous-fallback"
    args = ["-k", "(addmm or _copy_from) and float32", "--isolate", "none"]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "fallback_addmm_drops_bias,d2h_ignores_offset"})
    row = run.case(case)
    assert row["status"] == "failed" and row["check"] == "values", row
    assert not row["blocked_by"] and "blocked by" not in row["message"]
    assert "might be related: _copy_from-float32-" in row["message"]
    findings = run_json(run)["findings"]
    own = [f for f in findings if not f["blocked_by"] and f["ops"] == ["addmm.out"]]
    assert own and own[0]["related"] and own[0]["related"][0].startswith("_copy_from-float32-")
    assert any(f["title"].startswith("_copy_from") for f in findings)
    assert "might be related (not blocking): _copy_from-float32-" in run.output


def test_a_check_that_raises_is_an_error_of_ours_not_a_failure(run_suite):
    """The suite's own checks raising is `error` (check harness), never `failed` or `blocked`,
    and other ops are unaffected (issue 20)."""
    args = ["--ops", "abs,neg", "--dtypes", "float32", "--layouts", "contiguous"]
    run = run_suite(*args, "--paths", "native", "-p", "tests.suite.broken_check_plugin")
    row = run.case("abs-float32-contiguous-native")
    assert row["status"] == "error" and row["check"] == "harness", row
    assert "KeyError" in row["message"] and not row["blocked_by"]
    assert run.case("neg-float32-contiguous-native")["status"] == "passed"


def test_an_xfail_pinned_to_a_check_never_excuses_a_missing_kernel(run_suite, tmp_path):
    """Issue 32: an entry with `check = "values"` turned an undeclared `unsupported` case into
    `xfailed`."""
    needs("int_not_implemented")
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[[entry]]\npattern = "exp-int64-*"\nstatus = "xfail"\ncheck = "values"\n'
        'category = "backend-bug"\nreason = "rounds"\n'
    )
    args = ["--ops", "exp", "--dtypes", "int64", "--layouts", "contiguous", "--values", "ordinary"]
    run = run_suite(
        *args, "--expectations", str(manifest), env={"ECHO_NPU_FAULTS": "int_not_implemented"}
    )
    row = run.case("exp-int64-contiguous-native")
    assert row["status"] == "failed" and row["check"] == "unsupported", row
    assert "expects a [values] failure: this is another one" in row["message"]
