"""The -compile cases (issue 33, part): torch.compile on the device with echo_npu's Inductor
backend (backend/echo_npu/inductor.py, handed to Inductor by its device module), against CPU and
the device's eager result; each planted fault of the generated code (wrapper strides, device
guard, contiguous-input kernels, a kernel cache without the dtype, allocations sized at the
first compile of a dynamic graph) is named in the compiled
path of the case it breaks; without an Inductor backend the cases run with aot_eager and the
header says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import clean_env

# slow: Inductor compiles C++ for every planted fault
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

ARGS = ("--ops", "add.Tensor,relu,sum.dim_IntList", "--modes", "compile", "-k", "compile")


def test_compiled_cases_pass_with_the_device_inductor_backend(run_suite):
    run = run_suite(*ARGS)
    assert run.returncode == 0, run.output[-3000:]
    cases = [r for r in run.results if r["id"].endswith("-compile]")]
    assert {r["op"] for r in cases} == {"add", "relu", "sum"}
    assert {r["status"] for r in cases} == {"passed"}
    header = " ".join(run.info["header"])  # the run header's mode lines (run.json)
    assert "torch.compile backend 'inductor': the device's Inductor backend" in header


def test_a_wrapper_that_allocates_wrong_strides_fails_the_compiled_case_of_the_op(
    run_suite, tmp_path
):
    fault = {"ECHO_NPU_INDUCTOR_FAULTS": "wrong_strides"}
    repros = tmp_path / "repros"
    relu_only = ("--ops", "relu", "--dtypes", "float32", "--modes", "compile", "-k", "compile")
    run = run_suite(*relu_only, "--repro-dir", str(repros), env=fault)
    assert run.returncode == 1, run.output[-3000:]
    relu = run.case("relu-float32-contiguous-native-compile")
    assert relu["status"] == "failed" and relu["check"] == "compile", relu
    assert "compiled (torch.compile, backend='inductor'): output 0:" in relu["message"]
    assert "ECHO_NPU_INDUCTOR_FAULTS=wrong_strides" in relu["repro"]
    script = repros / "relu-float32-contiguous-native-compile.py"  # compiles, as the case did
    for env, code in ((fault, 1), ({}, 0)):
        ran = subprocess.run(
            [sys.executable, str(script)], env={**clean_env(), **env},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert ran.returncode == code, (env, ran.stdout, ran.stderr[-2000:])


#: planted fault -> the dtypes and layouts its run needs: the case it fails, a case it leaves
#: clean, and what the fault needs compiled before (a float32 kernel cached for the int32 case)
NEEDS = {
    "no_device_guard": ("float32", "contiguous"),
    "contiguous_inputs": ("float32", "contiguous,noncontiguous"),
    "cache_without_dtype": ("float32,int32", "contiguous"),
    "static_allocations": ("float32", "contiguous"),
}
FAULTS = {  # planted fault -> (the case it fails, what its message says)
    "no_device_guard": (
        "abs-float32-contiguous-native-compile",
        "compiled on npu:1 while npu:0 is current (torch.compile, 'inductor'): output 0 is on "
        "npu:0, its inputs on npu:1 (the wrapper allocates on the current device",
    ),
    "contiguous_inputs": (
        "abs-float32-noncontiguous-native-compile",
        "compiled (torch.compile, backend='inductor'): output 0:",
    ),
    "cache_without_dtype": (
        "abs-int32-contiguous-native-compile",
        "compiled (torch.compile, backend='inductor'): output 0:",
    ),
    "static_allocations": (  # the dynamic graph, compiled at [40, 20], called at [20, 20]
        "abs-float32-contiguous-native-compile",
        "compiled with dynamic shapes ('inductor'), the first size again [(20, 20)]: raised",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_planted_inductor_fault_fails_the_compiled_case_it_breaks(run_suite, fault):
    """A wrapper without a device guard, kernels that assume contiguous inputs, a kernel cache
    keyed without the dtype: each is named in the compiled path of the case it breaks, and
    only the cases it breaks fail (the eager cases of the op are not run: -k compile)."""
    dtypes, layouts = NEEDS[fault]  # each compile costs seconds: only the cases it judges
    run = run_suite(
        "--ops", "abs", "--dtypes", dtypes, "--layouts", layouts, "--modes", "compile",
        "-k", "compile", env={"ECHO_NPU_INDUCTOR_FAULTS": fault},
    )  # fmt: skip
    case, message = FAULTS[fault]
    assert run.returncode == 1, run.output[-3000:]
    record = run.case(case)
    assert record["status"] == "failed" and record["check"] == "compile", record
    assert message in record["message"], record["message"]
    if fault not in ("no_device_guard", "static_allocations"):  # these break every float32 case
        clean = [r["id"] for r in run.results if r["status"] == "passed"]
        assert "test_matches_cpu[abs-float32-contiguous-native-compile]" in clean, clean


def test_an_inductor_backend_that_fails_to_load_fails_the_cases_with_its_error(run_suite):
    """A device module whose Inductor classes raise on import breaks every compile in the
    process, CPU's too: the case names the device's backend, never skips as 'cpu cannot either'
    (torch 2.15 dropped a table echo_npu's backend imported: a whole run stopped on it once)."""
    run = run_suite(
        "--ops", "abs", "--dtypes", "float32", "--layouts", "contiguous", "--modes", "compile",
        "-k", "compile", env={"ECHO_NPU_INDUCTOR_FAULTS": "no_such_fault"},
    )  # fmt: skip
    assert run.returncode == 1, run.output[-3000:]
    record = run.case("abs-float32-contiguous-native-compile")
    assert record["status"] == "failed" and record["check"] == "compile", record
    assert (
        "the device's Inductor backend fails to load: torch.npu.Scheduling: ValueError"
        in (record["message"])
    )


def test_without_an_inductor_backend_the_cases_run_with_aot_eager(run_suite):
    run = run_suite(*ARGS, env={"ECHO_NPU_INDUCTOR": "0"})
    assert run.returncode == 0, run.output[-3000:]
    header = " ".join(run.info["header"])
    assert "torch.compile backend 'aot_eager': the device has no Inductor backend" in header


def test_importing_echo_npu_never_imports_inductor():
    """Its Inductor backend is handed over on first use: start-up stays as cheap as before."""
    import subprocess
    import sys

    from tests.helpers import clean_env

    code = "import sys, torch, echo_npu; print('torch._inductor' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]
