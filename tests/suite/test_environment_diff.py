"""Two runs that differ only in their environment are told apart (issue 33, item 5): run.json
records the compile environment, and `python -m conformance.report A B --diff` names what
differs next to the cases whose verdict changed. The planted change is a compiler flag: a `CXX`
wrapper that adds -ffast-math to Inductor's flags (as a CI image's compiler wrapper may), which
breaks the compiled amax on a NaN, and only there. It breaks Inductor's kernels on CPU alike, so
the case is a torch-bug (the toolchain's, not the device's), and the diff names the change next
to it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, clean_env

ARGS = ("--ops", "amax", "--dtypes", "float32", "--layouts", "contiguous", "--modes", "compile")
ARGS += ("-k", "compile")
CASE = "test_matches_cpu[amax-float32-contiguous-native-compile]"


@pytest.mark.slow
def test_report_diff_names_the_planted_compiler_flag_and_the_case_it_broke(run_suite, tmp_path):
    fast = tmp_path / "g++-fast-math"
    fast.write_text('#!/bin/sh\nexec g++ "$@" -ffast-math\n')
    fast.chmod(0o755)
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # the same in both runs
    plain = run_suite(*ARGS, env=cache)
    planted = run_suite(*ARGS, env={**cache, "CXX": str(fast)})
    assert plain.returncode == 0 and planted.returncode == 0, planted.output[-2000:]
    amax = planted.case("amax-float32-contiguous-native-compile")
    assert amax["status"] == "torch-bug" and "vs cpu nan" in amax["message"], amax
    assert "on cpu gives the device's result" in amax["message"], amax
    env = json.loads((planted.results_dir / "run.json").read_text())["compile_environment"]
    for key in ("torch", "backend", "compiler", "glibc", "isa", "allocator"):
        assert env.get(key), key
    assert env["$CXX"] == str(fast)
    a, b = str(plain.results_dir), str(planted.results_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.report", a, b, "--diff"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "| `$CXX` | - | " + str(fast) + " |" in out, out
    assert "## Verdicts: 1 case(s) changed" in out, out
    assert f"| `{CASE}` | passed | torch-bug |" in out, out


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
