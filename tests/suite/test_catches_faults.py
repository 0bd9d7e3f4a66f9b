"""The suite catches each fault injected into echo_npu, in the case that names the faulty op
and layout, with the right check, and passes the same cases without the fault."""

import pytest

FAULTS = {
    # fault: (pytest args, env, case that must fail, check, text in the message)
    "masked_fill_overflow": (
        [
            "--ops",
            "masked_fill_.Scalar",
            "--dtypes",
            "float32",
            "--layouts",
            "contiguous,transposed",
        ],
        {"ECHO_NPU_ALLOCATOR": "guard"},
        "masked_fill_.Scalar-float32-transposed-native",
        "memory",
        "after masked_fill_.Scalar: red zone after the block corrupted",
    ),
    "copy_ignores_offset": (
        ["--ops", "_copy_from", "--dtypes", "float32", "--layouts", "contiguous,offset"],
        {},
        "_copy_from-float32-offset-native",
        "values",
        "elements differ",
    ),
    "inplace_returns_new": (
        ["--ops", "add_.Tensor", "--dtypes", "float32", "--layouts", "contiguous"],
        {},
        "add_.Tensor-float32-contiguous-native",
        "inplace",
        "returned a new tensor instead of the self it wrote (called below autograd",
    ),
    "leak": (
        ["--ops", "mul.Tensor,mul.out", "--dtypes", "float32", "--layouts", "contiguous"],
        {},
        "mul.Tensor-float32-contiguous-native",
        "leak",
        "allocated during mul.Tensor still alive",
    ),
    # training and serving (issue 21): caught only by the -grad / -inference cases
    "gelu_wrong_backward": (
        ["--ops", "abs", "--fallback-ops", "gelu", "-k", "gelu", "--dtypes", "float32"]
        + ["--layouts", "contiguous", "--values", "ordinary", "--modes", "grad"],
        {},
        "gelu-float32-contiguous-native-grad",
        "grad",
        "grad of self (grad_output contiguous)",
    ),
    # an out= kernel that leaves its last element unwritten passed where out= was captured
    # holding the answer: out= arguments are now placed holding poison
    "out_skips_last": (
        ["--ops", "abs.out", "--dtypes", "float32,int64", "--layouts", "contiguous"],
        {},
        "abs.out-int64-contiguous-native",
        "values",
        "elements differ",
    ),
    "out_returns_new_inference": (
        ["--ops", "add.out", "--dtypes", "float32", "--layouts", "contiguous"]
        + ["--modes", "inference"],
        {},
        "add.out-float32-contiguous-native-inference",
        "out",
        "on inference tensors inside torch.inference_mode()",
    ),
    # caught only because the optimizer kernels now have samples (OpInfo's foreach databases,
    # conformance/ops/foreach.py): without them these overloads had no case at all
    "foreach_mul_skips_last": (
        ["--ops", "_foreach_mul_.Scalar", "--dtypes", "float32", "--layouts", "contiguous"],
        {},
        "_foreach_mul_.Scalar-float32-contiguous-native",
        "inplace",
        "version counter of self not bumped by the write",
    ),
    "fused_sgd_wrong_momentum": (
        ["--ops", "_fused_sgd_", "--dtypes", "float32", "--layouts", "contiguous"],
        {},
        "_fused_sgd_-float32-contiguous-native",
        "values",
        "self: ",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_fails_the_right_case(run_suite, fault):
    args, env, case, check, text = FAULTS[fault]
    clean = run_suite(*args, env=env)
    assert clean.returncode == 0, clean.output
    assert clean.case(case)["status"] == "passed"

    run = run_suite(*args, env={**env, "ECHO_NPU_FAULTS": fault})
    assert run.returncode == 1
    row = run.case(case)
    assert row["status"] == "failed" and row["check"] == check, row
    assert text in row["message"]
    assert f"ECHO_NPU_FAULTS={fault}" in row["repro"] and case in row["repro"]
    # contiguous inputs do not trigger the layout-dependent faults
    failed_layouts = {r["layout"] for r in run.failed()}
    if fault in ("masked_fill_overflow", "copy_ignores_offset"):
        assert failed_layouts == {case.split("-")[2]}, failed_layouts
    # only the faulty path fails: the fallback path does not use the broken kernel
    assert {r["path"] for r in run.failed()} == {"native"}


def test_leak_blames_only_the_leaking_op(run_suite):
    args, env, _, _, _ = FAULTS["leak"]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "leak"})
    assert {r["op"] + "." + r["overload"] for r in run.failed()} == {"mul.Tensor"}
    assert run.case("mul.out-float32-contiguous-native")["status"] == "passed"


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_segfault_marks_one_case_crashed_and_the_run_goes_on(run_suite, xdist):
    args = [
        "--ops",
        "sum.dim_IntList,abs",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous,zero_size,transposed",
        "--values",
        "ordinary",
        *xdist,
    ]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "segfault_empty"})
    crashed = [r for r in run.results if r["status"] == "crashed"]
    assert [r["id"] for r in crashed] == [
        "test_matches_cpu[sum.dim_IntList-float32-zero_size-native]"
    ]
    assert "SIGSEGV" in crashed[0]["message"] or "crashed" in crashed[0]["message"]
    assert len(run.results) == 12  # every other case ran
    assert {r["status"] for r in run.results if r not in crashed} == {"passed"}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_repro_command_reproduces_the_failure_alone(run_suite, fault):
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]

    args, env, case, _, text = FAULTS[fault]
    run = run_suite(*args, env={**env, "ECHO_NPU_FAULTS": fault})
    repro = run.case(case)["repro"]
    proc = subprocess.run(
        ["bash", "-c", repro.replace("pytest ", f"{shlex.quote(sys.executable)} -m pytest ", 1)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "1 failed" in proc.stdout, (shlex.split(repro), proc.stdout)
    assert text in proc.stdout


def test_repro_script_reproduces_with_saved_inputs(run_suite, tmp_path):
    import subprocess
    import sys

    args, env, case, _, _ = FAULTS["masked_fill_overflow"]
    repros = tmp_path / "repros"
    faulty = {**env, "ECHO_NPU_FAULTS": "masked_fill_overflow"}
    run = run_suite(*args, "--repro-dir", str(repros), env=faulty)
    assert run.returncode == 1
    script = repros / f"{case}.py"
    assert script.exists() and (repros / f"{case}.pt").exists()
    assert f"repro script: python {script}" in run.case(case)["message"]

    def replay(extra_env):
        clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith("ECHO_")}
        return subprocess.run(
            [sys.executable, str(script)],
            env={**clean, **extra_env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    broken = replay(faulty)
    assert broken.returncode == 1 and "device memory corrupted" in broken.stdout
    fixed = replay(env)  # same inputs, no fault: the device agrees with CPU
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_results_survive_sigkill_of_the_whole_run(tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "conformance",
            "-q",
            "--results",
            str(results),
            "--ops",
            "add.Tensor,mul.Tensor,sub.Tensor,div.Tensor",
            "-p",
            "no:randomly",
        ],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    lines: list[str] = []
    deadline = time.time() + 120
    while time.time() < deadline and len(lines) < 20:
        time.sleep(0.5)
        files = list(results.glob("cases-*.jsonl"))
        lines = [ln for f in files for ln in f.read_text().splitlines()]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    after = [ln for f in results.glob("cases-*.jsonl") for ln in f.read_text().splitlines()]
    assert len(after) >= 20
    assert all(json.loads(ln)["status"] for ln in after)  # every line is whole JSON
