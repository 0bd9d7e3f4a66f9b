"""Two runs that differ only in their environment are told apart (issue 33, item 5): run.json
records the compile environment, and `python -m conformance.report A B --diff` names what
differs next to the cases whose verdict changed. The planted change is a compiler flag: a `CXX`
wrapper that adds -ffast-math to Inductor's flags (as a CI image's compiler wrapper may), which
breaks the compiled amax on a NaN, and only there."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO, clean_env

ARGS = ("--ops", "amax", "--dtypes", "float32", "--modes", "compile", "-k", "compile")
CASE = "test_matches_cpu[amax-float32-contiguous-native-compile]"


def test_report_diff_names_the_planted_compiler_flag_and_the_case_it_broke(run_suite, tmp_path):
    fast = tmp_path / "g++-fast-math"
    fast.write_text('#!/bin/sh\nexec g++ "$@" -ffast-math\n')
    fast.chmod(0o755)
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # the same in both runs
    plain = run_suite(*ARGS, env=cache)
    repros = tmp_path / "repros"
    planted = run_suite(*ARGS, "--repro-dir", str(repros), env={**cache, "CXX": str(fast)})
    assert plain.returncode == 0, plain.output[-2000:]
    assert planted.returncode == 1, planted.output[-2000:]
    amax = planted.case("amax-float32-contiguous-native-compile")
    assert amax["check"] == "compile" and "vs cpu nan" in amax["message"], amax
    assert amax["repro"].startswith(f"CXX={fast} "), amax["repro"]  # the repro keeps the flag
    script = repros / "amax-float32-contiguous-native-compile.py"  # compiles, as the case did
    for cxx, code in ((str(fast), 1), ("g++", 0)):
        ran = subprocess.run(
            [sys.executable, str(script)], env={**clean_env(), **cache, "CXX": cxx},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert ran.returncode == code, (cxx, ran.stdout, ran.stderr[-2000:])
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
    assert f"| `{CASE}` | passed | failed |" in out, out


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
