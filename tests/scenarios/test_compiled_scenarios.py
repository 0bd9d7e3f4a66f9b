"""The compiled-path scenarios (--modes compile) on echo_npu: Inductor's C++ wrapper
(test_cpp_wrapper.py) matches eager on the device, each planted fault of echo_npu's C++ wrapper
fails the function it breaks, naming it, and the AOTInductor package for the device fails where
torch's runtime refuses the device, after packaging (issue 33)."""

from __future__ import annotations

import re

import pytest

# slow: Inductor's C++ wrapper built for each planted fault
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

COMPILE = ("--modes", "compile")


def _failed(output: str) -> list[str]:
    return [f.rsplit("::", 1)[-1] for f in re.findall(r"^FAILED (\S+)", output, flags=re.M)]


def test_the_cpp_wrapper_scenarios_pass_on_the_device(run_scenarios):
    run = run_scenarios(*COMPILE, "-k", "cpp_wrapper")
    assert run.returncode == 0, run.output[-3000:]
    assert "4 passed" in run.output, run.output[-2000:]


# fault -> (the scenario it must fail, a text of its failure)
FAULTS = {
    "cpu_shims": ("test_cpp_wrapper_matches_eager[sort_scale]", "aoti_torch_cpu_sort_stable("),
    "cpp_index_zero": (
        "test_cpp_wrapper_matches_eager[matmul_bias]",
        "cpp_wrapper matmul_bias: output 0 is on npu:0, its inputs on npu:1",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_cpp_wrapper_fault_fails_the_function_it_breaks(run_scenarios, fault):
    scenario, text = FAULTS[fault]
    function = scenario.split("[")[1].rstrip("]")  # compiles cost seconds: that scenario alone
    keyword = f"cpp_wrapper and {function}"
    run = run_scenarios(*COMPILE, "-k", keyword, env={"ECHO_NPU_INDUCTOR_FAULTS": fault})
    assert run.returncode == 1, run.output[-3000:]
    assert scenario in _failed(run.output), run.output[-3000:]
    assert text in run.output, run.output[-3000:]


def test_a_device_whose_inductor_backend_fails_to_load_fails_never_skips(run_scenarios):
    """A broken Inductor backend breaks CPU's compiles too: the scenario names it, never skips
    as 'cpu cannot compile it either'."""
    run = run_scenarios(
        *COMPILE, "-k", "cpp_wrapper", env={"ECHO_NPU_INDUCTOR_FAULTS": "no_such_fault"}
    )
    assert len(_failed(run.output)) == 4, run.output[-3000:]
    assert "the device's Inductor backend fails to load: torch.npu.Scheduling: ValueError" in (
        run.output
    ), run.output[-3000:]


def test_the_device_package_is_built_and_refused_by_torchs_runtime_only(run_scenarios):
    """Without the manifest the AOTI scenario for the device fails at loading, with echo_npu's
    runner naming torch's device list: packaging (its C++ wrapper and shims) worked."""
    run = run_scenarios(
        *COMPILE, "--expectations", "none", "-k", "aoti_package_for_the_device_matches_cpu"
    )
    assert _failed(run.output) == ["test_aoti_package_for_the_device_matches_cpu"], run.output
    assert "the AOTInductor model refused to be created for device 'npu'" in run.output, run.output[
        -3000:
    ]
