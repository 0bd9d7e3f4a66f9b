"""Two runs that differ only in their environment are told apart (issue 33, item 5): run.json
records the compile environment, and `python -m conformance.report A B --diff` names what
differs next to the cases whose verdict changed. The planted change is an environment
variable the backend reads (echo_npu's fault switch), the run-time twin of a compiler flag."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO, clean_env

ARGS = (
    "--ops",
    "add_.Tensor",
    "--dtypes",
    "float32",
    "--layouts",
    "contiguous",
    "--values",
    "ordinary",
    "-k",
    "test_matches_cpu",
)


def test_report_diff_names_the_changed_variable_and_the_case_it_broke(run_suite, tmp_path):
    plain = run_suite(*ARGS)
    planted = run_suite(*ARGS, env={"ECHO_NPU_FAULTS": "inplace_returns_new"})
    assert plain.returncode == 0 and planted.returncode == 1, planted.output[-2000:]
    env = json.loads((planted.results_dir / "run.json").read_text())["compile_environment"]
    for key in ("torch", "backend", "compiler", "glibc", "isa", "allocator"):
        assert env.get(key), key
    assert env["$ECHO_NPU_FAULTS"] == "inplace_returns_new"
    a, b = str(plain.results_dir), str(planted.results_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.report", a, b, "--diff"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "## Environment: 1 difference(s)" in out, out
    assert "| `$ECHO_NPU_FAULTS` | - | inplace_returns_new |" in out, out
    assert "## Verdicts: 1 case(s) changed" in out, out
    assert "| `test_matches_cpu[add_.Tensor-float32-contiguous-native]` | passed | failed |" in out


def test_diff_needs_two_runs_and_says_so_in_one_line(tmp_path, run_suite):
    one = run_suite(*ARGS)
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.report", str(one.results_dir), "--diff"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: --diff compares two runs; 1 folder(s) gave 1: pass two results folders, A then B"
    )
