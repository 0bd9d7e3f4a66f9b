"""A backend that compiles each kernel on first use (tests/backends/jit_backend.py: `abs` sleeps
on its first call in a process): the case that made that call records it (`first_call_s`), the
summary says how much of the run went there, and later cases of the op do not carry it."""

from pathlib import Path

BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
# one runner: a first call is each runner's (without -n a pytest process runs one per core)
ARGS = ("--backend", "jit_backend", "--ops", "abs", "--dtypes", "float32,float64", "--paths",
        "native", "--values", "ordinary", "--runners", "1")  # fmt: skip


def test_the_first_call_of_a_kernel_is_timed_apart(run_suite):
    env = {"PYTHONPATH": BACKENDS, "JIT_BACKEND_COMPILE_S": "1.5"}
    run = run_suite(*ARGS, "--layouts", "contiguous,transposed", env=env)
    assert run.returncode == 0, run.output
    timed = [r for r in run.results if "first_call_s" in r]
    assert len(timed) == 1, [(r["id"], r.get("first_call_s")) for r in run.results]
    assert timed[0]["first_call_s"] >= 1.5, timed[0]
    assert "first calls (each overload's first device call in its runner" in run.output
    assert "longest: abs" in run.output


def test_no_first_call_line_where_kernels_are_ready(run_suite):
    env = {"PYTHONPATH": BACKENDS, "JIT_BACKEND_COMPILE_S": "0"}
    run = run_suite(*ARGS, "--layouts", "contiguous", env=env)
    assert run.returncode == 0, run.output
    assert "first calls (" not in run.output
