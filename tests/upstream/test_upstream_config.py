"""The upstream configuration generator, end to end on echo_npu with planted faults.

One measured run (faults `nan_to_zero`: relu and where turn NaN into 0, a finding; and
`int_not_implemented`: exp has no integer kernel, unsupported) becomes a configuration; a
device-generic test module in PyTorch's own style (pytorch_style_ops.py: `test_compare_cpu`)
then runs on echo_npu (a) without it: the findings and the missing kernels fail; (b) with it:
green, every excused test an expected failure; (c) with it and a fault it does not excuse
(`exp_skips_tail`): exp's tests fail. Also: a key that names no OpInfo is an error, a torch
without the API a one-line error, and the evidence rules on synthetic records.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.errors import ConformanceUsageError
from conformance.record import CaseRecord
from conformance.upstream.__main__ import main
from conformance.upstream.api import KNOWN, api_for
from conformance.upstream.evidence import build, measured_capabilities
from conformance.upstream.render import render
from conformance.upstream.targets import template
from tests.helpers import REPO, clean_env, once_per_run, run_pytest

# slow: the upstream generator's runs of OpInfo tests
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

FAULTS = "nan_to_zero,int_not_implemented"
OPS = "exp,nn.functional.relu,where,abs"  # abs: a clean op the configuration must leave alone
MODULE = "tests/upstream/pytorch_style_ops.py"
#: what the planted faults break in the PyTorch-style tests (test name suffix: op_device_dtype)
EXPECTED = {
    *(f"exp_npu_{d}" for d in ("int8", "int16", "int32", "int64", "uint8")),
    *(f"nn_functional_relu_npu_{d}" for d in ("float16", "bfloat16", "float32", "float64")),
    *(f"where_npu_{d}" for d in ("float16", "bfloat16", "float32", "float64")),
}


def _measure(folder: Path) -> str:
    """The suite's run with the faults, and the configuration written from its results."""
    results = folder / "results"
    run = run_pytest(
        "conformance", "--ops", "exp,relu,where.self,abs", "--dtypes", "all",
        "--layouts", "contiguous", "--paths", "native", "--modes", "none",
        "--results", str(results), "-p", "no:cacheprovider",
        env={"ECHO_NPU_FAULTS": FAULTS}, timeout=600,
    )  # fmt: skip
    assert "failing cases" in run.stdout, run.stdout[-2000:]
    config = folder / "upstream_config.py"
    assert main([str(results), "-o", str(config), "--allowlist"]) == 0
    return str(config)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    return Path(once_per_run(tmp_path_factory, "upstream-config", _measure))


def _pytorch_tests(config: Path | None, faults: str = FAULTS) -> dict[str, str]:
    """{test name suffix: outcome} of the PyTorch-style module on echo_npu."""
    env = {"ECHO_NPU_FAULTS": faults, "UPSTREAM_OPS": OPS}
    args = [MODULE, "-rA", "-p", "no:cacheprovider"]
    if config is not None:
        env["PYTHONPATH"] = str(config.parent)
        args += ["-p", config.stem]
    run = run_pytest(*args, env=env, timeout=600)
    outcomes = {
        m.group(2): m.group(1)
        for m in re.finditer(
            r"^(PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED)\S* \S*test_compare_cpu_(\w+)",
            run.stdout,
            re.M,
        )  # fmt: skip
    }
    assert outcomes, run.stdout[-3000:] + run.stderr[-2000:]
    return outcomes


def test_without_the_configuration_the_faults_fail() -> None:
    outcomes = _pytorch_tests(None)
    failed = {name for name, outcome in outcomes.items() if outcome == "FAILED"}
    assert failed == EXPECTED
    assert any(name.startswith("abs_") for name in outcomes)


def test_with_the_configuration_green_and_every_excuse_expected(config: Path) -> None:
    outcomes = _pytorch_tests(config)
    assert {n for n, o in outcomes.items() if o == "XFAIL"} == EXPECTED
    assert set(outcomes.values()) == {"PASSED", "XFAIL"}
    text = config.read_text()
    assert "def _check()" in text and "op_allowlist=OP_ALLOWLIST," in text
    assert '"abs": [' not in text  # nothing excused where nothing failed


def test_a_fault_the_configuration_does_not_excuse_fails(config: Path) -> None:
    outcomes = _pytorch_tests(config, FAULTS + ",exp_skips_tail")
    failed = {n for n, o in outcomes.items() if o == "FAILED"}
    assert failed and all(n.startswith("exp_npu_") for n in failed)
    assert {"exp_npu_float32", "exp_npu_float64"} <= failed


def test_a_key_naming_no_opinfo_is_an_error(config: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken_config.py"
    broken.write_text(
        config.read_text().replace('        "abs",\n', '        "abs",\n        "no_such_op",\n')
    )
    run = subprocess.run(
        [sys.executable, "-c", "import broken_config"],
        cwd=REPO, env=clean_env({"PYTHONPATH": str(tmp_path)}), capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode != 0
    assert "ConfigurationError: broken_config: 1 key(s) name no OpInfo" in run.stderr
    assert "no_such_op" in run.stderr


def test_a_torch_without_the_api_is_a_one_line_error() -> None:
    with pytest.raises(ConformanceUsageError, match=r"torch 2.12.0 has no set_test_configs"):
        api_for("2.12.0")
    with pytest.raises(ConformanceUsageError, match="does not know"):
        api_for("2.16.0")
    with pytest.raises(ConformanceUsageError, match="no torch version"):
        api_for("")
    assert api_for("2.15.0+cu128").capabilities and not api_for("2.13.0").capabilities


def test_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path / "missing"), "-o", str(tmp_path / "c.py")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


# ---- the evidence rules, on synthetic records ---------------------------------------------------
META = {
    "torch": __import__("torch").__version__,
    "backend": "echo_npu",
    "device": "npu",
    "coverage": {"registered": ["relu", "exp", "abs"]},
    "profile": {"compiler": {"value": None}},
}


def _record(
    case: str, status: str = "failed", check: str = "values", sample: str = "", **extra
) -> CaseRecord:
    """A record of `case`; a failure names `sample` (default: a relu call of relu's OpInfo) and,
    for values, a first element NaN on CPU and 0 on the device."""
    overload, dtype, layout, path, *values = case.split("-")
    op, _, tag = overload.partition(".")
    sample = sample or f"{overload}({dtype}[9])"
    message = (
        f"[{check}] output: 3/9 elements differ; first at [6]: device 0.0 vs cpu nan\n"
        f"  sample: {sample} (layout {layout}, path {path}, allocator malloc)"
    )
    return CaseRecord(
        id=f"test_matches_cpu[{case}]", status=status, op=op, overload=tag or "default",
        dtype=dtype, layout=layout, path=path, check=check if status != "passed" else None,
        message=message if status != "passed" else None, family="ops",
        extra={"values": values[0]} if values else {}, **extra,
    )  # fmt: skip


def _build(records):
    return build([(META, records)], source="synthetic")


def test_only_what_a_compare_test_sees_is_excused() -> None:
    config = _build([
        _record("relu-float32-contiguous-native-special"),
        _record("exp-float32-contiguous-native", check="path"),  # routing: not seen upstream
        _record("abs-float32-transposed-native"),  # our layout, not OpInfo's
        _record("abs-float64-contiguous-native", status="not-run", check=""),  # never ran
        _record("exp-float64-contiguous-native", sample="exp(float64[1234, 5])"),  # not exp's
    ])  # fmt: skip
    assert [(o.op, o.kind, sorted(o.dtypes)) for o in config.overrides] == [
        ("nn.functional.relu", "xfail", ["float32"])
    ]
    assert not config.exclusions  # the compiler was not asked (no --modes compile)
    assert "abs" in config.allowlist and "exp" in config.allowlist
    assert any("whose call no OpInfo test makes" in line for line in config.not_excused)


def test_a_values_finding_within_the_tests_tolerance_is_not_excused() -> None:
    small = _record("relu-float32-contiguous-native-special")
    small.message = small.message.replace("device 0.0 vs cpu nan", "device 1.0004 vs cpu 1.0")
    config = _build([small])
    assert not config.overrides
    assert any("within the test's tolerance" in line for line in config.not_excused)
    strict = build([(META, [small])], source="s", templates=[template("TestFoo.test_bar")])
    assert [(o.op, o.kind) for o in strict.overrides] == [("nn.functional.relu", "xfail")]


def test_a_crash_skips_every_test_of_the_op_and_dtype() -> None:
    """A crash anywhere (a -grad case, another layout) skips each OpInfo that may make the call:
    a crash takes PyTorch's test process down; a crash no OpInfo reaches is named instead."""
    crash = _record("abs-float64-contiguous-native", status="crashed", check="crash")
    in_grad = _record("neg-float64-transposed-native-grad", status="crashed", check="crash")
    unknown = _record("_local_scalar_dense-float64-contiguous-native", status="crashed",
                      check="crash")  # fmt: skip
    config = _build([crash, in_grad, unknown])
    assert [(o.op, o.kind, o.dtypes) for o in config.overrides] == [
        ("abs", "skip", {"float64"}),
        ("neg", "skip", {"float64"}),
    ]
    assert all(o.reason.startswith("crash: ") for o in config.overrides)
    assert any("_local_scalar_dense" in line and "no OpInfo test" in line
               for line in config.not_excused)  # fmt: skip


def test_tolerances_are_measured_capped_and_never_cover_a_failure() -> None:
    def passing(case: str, abs_err: float, rel_err: float) -> CaseRecord:
        return _record(case, status="passed", max_abs_err=abs_err, max_rel_err=rel_err)

    records = [
        passing("abs-float16-contiguous-native", 3e-5, 2e-3),  # within 4x atol: measured
        passing("exp-float16-contiguous-native", 1.0, 1.0),  # far beyond: not excused
        passing("relu-float16-contiguous-native", 3e-5, 2e-3),
        _record("relu-float16-contiguous-native-special"),  # relu float16 fails: no tolerance
    ]
    assert not [o for o in _build(records).overrides if o.kind == "tolerance"]  # within 1e-3
    config = build([(META, records)], source="s", templates=[template("TestFoo.test_bar")])
    kinds = {(o.op, o.kind) for o in config.overrides}
    assert ("abs", "tolerance") in kinds and ("nn.functional.relu", "xfail") in kinds
    assert ("exp", "tolerance") not in kinds and ("nn.functional.relu", "tolerance") not in kinds
    (tolerance,) = [o for o in config.overrides if o.kind == "tolerance"]
    assert tolerance.atol == pytest.approx(3e-5)
    assert any(line.startswith("exp float16") for line in config.not_excused)
    text = render(config, "upstream_config.py")
    assert "atol=3e-05" in text and "TestFoo.test_bar" in text


def test_torch_2_15_declares_capabilities_from_the_run() -> None:
    records = [_record("relu-bfloat16-contiguous-native", status="passed")]
    config = _build(records)
    caps = measured_capabilities(records, set())
    newer = dataclasses.replace(config, api=KNOWN["2.15"], capabilities=caps)
    text = render(newer, "upstream_config.py")
    compile(text, "upstream_config.py", "exec")
    block = text.split("CAPABILITIES = {")[1].split("}")[0]
    assert '"dtype.bf16": True' in block and '"dtype.fp8": False' in block
    assert "PrivateUse1TestBase._capabilities = classmethod(" in text
    assert "CAPABILITIES" not in render(config, "upstream_config.py")


def test_input_kernels_the_tests_need_are_named_when_missing() -> None:
    lacking = {**META, "coverage": {"registered": ["relu", "empty.memory_format"]}}
    config = build([(lacking, [_record("relu-float32-contiguous-native", status="passed")])],
                   source="synthetic")  # fmt: skip
    assert [line.split(":")[0] for line in config.prerequisites] == ["uniform_"]
    assert "Missing before any op is judged" in render(config, "upstream_config.py")
    served = {**lacking, "coverage": {**lacking["coverage"], "has_fallback": True}}
    records = [_record("relu-float32-contiguous-native", status="passed")]
    assert not build([(served, records)], source="synthetic").prerequisites


def test_results_without_coverage_are_refused() -> None:
    bare = {k: v for k, v in META.items() if k != "coverage"}
    with pytest.raises(ConformanceUsageError, match="no coverage"):
        build([(bare, [])], source="synthetic")


def test_a_case_flaky_between_runs_excuses_nothing() -> None:
    fails = _record("relu-float32-contiguous-native-special")
    passes = _record("relu-float32-contiguous-native-special", status="passed")
    config = build([(META, [fails]), (META, [passes])], source="synthetic")
    assert not config.overrides
    assert any("flaky" in line for line in config.not_excused)


def test_a_declared_dtype_excuses_only_the_cases_that_raised() -> None:
    raised = _record("exp-float64-contiguous-native", status="unsupported", check="unsupported",
                     sample="exp(float64[20])")  # fmt: skip
    raised.extra["unsupported_dtype"] = "float64"
    served = _record("abs-float64-contiguous-native", status="passed")
    config = _build([raised, served])
    assert [(o.op, o.kind, sorted(o.dtypes)) for o in config.overrides] == [
        ("exp", "xfail", ["float64"])
    ]
