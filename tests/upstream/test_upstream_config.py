"""The upstream configuration generator, end to end on echo_npu with planted faults, against the
modelled PyTorch tests (tests/upstream/pytorch/: test_ops' compare_cpu, numpy_ref,
noncontiguous_samples and variant_consistency_eager, test_unary_ufuncs' and test_binary_ufuncs'
reference numerics, test_reductions' extremal values, written in PyTorch's style from
conformance/upstream/models.py).

One measured run with the faults `nan_to_zero` (relu and where turn NaN into 0: relu has a numpy
reference and is a unary ufunc, where is test_numpy_ref's), `tril_negative_diagonal` (a value
fault of an op without one: test_compare_cpu's; and tril_, CPU's through the fallback, disagrees
with it: test_variant_consistency_eager's), `index_select_strided_as_contiguous` (only
non-contiguous inputs: test_noncontiguous_samples'), `mm_nan_to_zero` (only NaN results: no test
of finite inputs sees it), `int_not_implemented` (exp has no integer kernel) and
`inplace_returns_new` (add_ returns a new tensor) becomes a configuration; the modelled tests
then run on echo_npu (a) without it: they fail exactly where
the faults are; (b) with it: no failure, no unexpected success, every expected failure backed by
a case of the run; (c) with it and a fault it does not excuse (`exp_skips_tail`): exp's tests
fail. Also: a key that names no OpInfo is an error, bad input a one-line error, and the evidence
rules on synthetic records.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.upstream.__main__ import main
from tests.helpers import REPO, clean_env, once_per_run, run_pytest

# slow: the upstream generator's runs of OpInfo tests
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

FAULTS = (
    "nan_to_zero,tril_negative_diagonal,index_select_strided_as_contiguous,mm_nan_to_zero,"
    "int_not_implemented,inplace_returns_new"
)
#: the OpInfos the modelled tests run (abs, eq and amax: clean ops the file must leave alone)
OPS = "exp,nn.functional.relu,where,abs,tril,index_select,mm,eq,amax,add"
SUITE_OPS = (
    "exp,exp_,relu,relu_,where.self,abs,abs_,tril,index_select,mm,eq.Tensor,amax,add.Tensor,"
    "add_.Tensor"
)
FOLDER = "tests/upstream/pytorch"
MODULES = [f"{FOLDER}/pytorch_test_{m}.py" for m in ("ops", "unary_ufuncs", "binary_ufuncs",
                                                     "reductions")]  # fmt: skip
_INTS = ("int16", "int32", "int64", "int8", "uint8")
_FLOATS = ("bfloat16", "float16", "float32", "float64")
#: what the planted faults break in the modelled tests (test name: test_<name>_<op>_npu_<dtype>)
EXPECTED = {
    "test_compare_cpu_tril_npu_float32",  # a negative diagonal, contiguous inputs
    "test_numpy_ref_where_npu_float64",  # where's reference inputs hold NaN
    "test_noncontiguous_samples_index_select_npu_float32",
    "test_noncontiguous_samples_index_select_npu_int64",
    "test_noncontiguous_samples_exp_npu_int64",  # exp has no integer kernel
    "test_variant_consistency_eager_add_npu_float32",  # add_ returns a new tensor
    "test_variant_consistency_eager_tril_npu_float32",  # tril wrong, tril_ CPU's (fallback)
    *(f"test_reference_numerics_extremal_nn_functional_relu_npu_{d}" for d in _FLOATS),
    *(f"test_reference_numerics_{k}_exp_npu_{d}" for k in ("normal", "small") for d in _INTS),
    *(f"test_reference_numerics_large_exp_npu_{d}" for d in ("int16", "int32", "int64")),
}


def _measure(folder: Path) -> str:
    """The suite's run with the faults, and the configuration written from its results."""
    results = folder / "results"
    run = run_pytest(
        "conformance", "--ops", SUITE_OPS, "--dtypes", "all",
        "--layouts", "contiguous,noncontiguous", "--paths", "native", "--modes", "none",
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


def _pytorch_tests(plugin: Path | str, faults: str = FAULTS) -> dict[str, str]:
    """{test name: outcome} of the modelled PyTorch tests on echo_npu under `plugin` (the
    generated module, or `bypass_only`: the same @onlyOn gates lifted, nothing excused)."""
    folder = plugin.parent if isinstance(plugin, Path) else REPO / FOLDER
    env = {"ECHO_NPU_FAULTS": faults, "UPSTREAM_OPS": OPS,
           "PYTHONPATH": f"{folder}:{REPO / FOLDER}"}  # fmt: skip
    name = plugin.stem if isinstance(plugin, Path) else plugin
    run = run_pytest(*MODULES, "-rA", "-p", "no:cacheprovider", "-p", name, env=env, timeout=600)
    outcomes = {
        m.group(2): m.group(1)
        for m in re.finditer(
            r"^(PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED)\S* \S*::(test_\w+)", run.stdout, re.M
        )
    }
    assert outcomes, run.stdout[-3000:] + run.stderr[-2000:]
    return outcomes


def test_without_the_configuration_the_faults_fail() -> None:
    outcomes = _pytorch_tests("bypass_only")
    assert {name for name, outcome in outcomes.items() if outcome == "FAILED"} == EXPECTED
    assert outcomes["test_compare_cpu_mm_npu_float32"] == "PASSED"  # finite inputs: no NaN
    assert outcomes["test_compare_cpu_index_select_npu_float32"] == "PASSED"  # contiguous
    assert any(name.endswith("_abs_npu_float32") for name in outcomes)  # clean ops still run


def test_with_the_configuration_green_and_every_excuse_expected(config: Path) -> None:
    outcomes = _pytorch_tests(config)
    assert {n for n, o in outcomes.items() if o == "XFAIL"} == EXPECTED
    assert set(outcomes.values()) <= {"PASSED", "XFAIL", "SKIPPED"}
    text = config.read_text()
    assert "def _check()" in text and "op_allowlist=OP_ALLOWLIST," in text
    assert '"abs": [' not in text and '"mm": [' not in text  # nothing excused: nothing seen
    assert "PrivateUse1TestBase.bypass_device_restrictions = True" in text
    assert "PYTORCH_TESTING_DEVICE_ONLY_FOR=npu PYTORCH_TEST_WITH_SLOW=1" in text
    # the mm fault: measured (its -special case), seen by no modelled test, said so
    assert re.search(r"# not excused: mm-float32-contiguous-native-special: no upstream test", text)


def test_a_fault_the_configuration_does_not_excuse_fails(config: Path) -> None:
    outcomes = _pytorch_tests(config, FAULTS + ",exp_skips_tail")
    failed = {n for n, o in outcomes.items() if o == "FAILED"}
    assert failed and all("_exp_npu_" in n for n in failed)
    assert "test_reference_numerics_normal_exp_npu_float32" in failed


def test_the_file_runs_the_tests_under_unittest_too(config: Path) -> None:
    """`python upstream_config.py <test file>`: configured, then the file runs as PyTorch's CI
    runs it (unittest, through its run_tests()). Without the CI variable: under it torch's
    run_tests() writes XML reports through xmlrunner, which the project does not install."""
    env = clean_env({"ECHO_NPU_FAULTS": FAULTS, "UPSTREAM_OPS": OPS,
                     "PYTHONPATH": f"{REPO / FOLDER}:{REPO}"})  # fmt: skip
    env.pop("CI", None)
    run = subprocess.run(
        [sys.executable, str(config), f"{REPO / FOLDER}/pytorch_test_ops.py", "-k", "tril"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "expected failures=2" in run.stderr, run.stderr[-2000:]  # compare_cpu, variants


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
