"""A device that computes float16/bfloat16 in the dtype itself (tests/backends/half_backend.py:
addcmul and sum with one rounding per step): undeclared, its few ulps fail; declared with the
manifest's `computes_in_dtype`, they pass with a note, judged against the float64 result with
the dtype's own accuracy; a kernel that is wrong beyond that still fails under the declaration."""

from pathlib import Path

import pytest

BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
HALF = ("float16", "bfloat16")
OPS = "addcmul,sum.dim_IntList"
CASES = [f"{op}-{dtype}-contiguous-native" for op in OPS.split(",") for dtype in HALF]
ARGS = (
    *("--backend", "half_backend", "--ops", OPS, "--dtypes", ",".join((*HALF, "float32"))),
    *("--layouts", "contiguous", "--paths", "native", "--values", "ordinary"),
)


@pytest.fixture
def declared(tmp_path: Path) -> str:
    manifest = tmp_path / "half.toml"
    manifest.write_text('computes_in_dtype = ["float16", "bfloat16"]\n')
    return str(manifest)


def test_undeclared_half_in_half_fails_as_values(run_suite):
    run = run_suite(*ARGS, env={"PYTHONPATH": BACKENDS})
    for case in CASES:
        row = run.case(case)
        assert row["status"] == "failed" and row["check"] in ("values", "rounding"), row
    assert run.case("addcmul-float32-contiguous-native")["status"] == "passed"


def test_declared_half_in_half_passes_with_a_note(run_suite, declared):
    run = run_suite(*ARGS, "--expectations", declared, env={"PYTHONPATH": BACKENDS})
    assert run.returncode == 0 and not run.failed(), run.output
    for case in CASES:
        row = run.case(case)
        assert row["status"] == "passed", row
        dtype = case.split("-")[1]
        assert f"values computed in {dtype} (manifest computes_in_dtype)" in row["message"], row
    declared_line = "computes in the dtype itself as declared: bfloat16, float16"
    assert declared_line in run.info["relies_on"]["last bits"]


def test_declared_but_wrong_beyond_the_dtype_s_accuracy_fails(run_suite, declared):
    env = {"PYTHONPATH": BACKENDS, "HALF_BACKEND_BUG": "1"}
    run = run_suite(*ARGS, "--expectations", declared, env=env)
    for case in CASES:
        row = run.case(case)
        assert row["status"] == "failed" and row["check"] == "values", row
        dtype = case.split("-")[1]
        assert f"by more than {dtype}'s own accuracy" in row["message"], row["message"]
        assert "from the float64 result" in row["message"], row["message"]


def test_a_declaration_outside_half_precision_is_one_line(run_suite, tmp_path):
    manifest = tmp_path / "bad.toml"
    manifest.write_text('computes_in_dtype = ["float32"]\n')
    run = run_suite("--ops", "add.Tensor", "--expectations", str(manifest))
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "computes_in_dtype must list dtype names (float16, bfloat16)" in run.output


def _half_cases(op: str) -> list[str]:
    return [f"{op}-{dtype}-contiguous-native" for dtype in HALF]


def test_declared_small_results_are_held_to_their_own_scale(run_suite, declared):
    """Issue 56: the allowance was 4 roundings at the largest input's scale, so an addcmul
    that flips the sign of every result below 1/32 of its largest input passed declared. Per
    element, at the scale of its own operands and result, it fails."""
    env = {"PYTHONPATH": BACKENDS, "HALF_BACKEND_BUG": "sign"}
    args = [*ARGS[:3], "addcmul", *ARGS[4:]]
    run = run_suite(*args, "--expectations", declared, env=env)
    for case in _half_cases("addcmul"):
        row = run.case(case)
        assert row["status"] == "failed" and row["check"] == "values", row
        assert "at the element's own operands' scale" in row["message"], row["message"]
    assert run.case("addcmul-float32-contiguous-native")["status"] == "passed"


def test_the_declaration_never_excuses_an_op_that_computes_nothing(run_suite, declared):
    """Issue 56: `computes_in_dtype` switched `rounding` off for every op of the dtype, so a
    `cat` that clears the lowest bit of every half value passed declared. A copy rounds
    nothing in any precision: it fails, declared or not."""
    env = {"PYTHONPATH": BACKENDS, "HALF_BACKEND_BUG": "copy"}
    args = [*ARGS[:3], "cat", *ARGS[4:]]
    for manifest in ([], ["--expectations", declared]):
        run = run_suite(*args, *manifest, env=env)
        for case in _half_cases("cat"):
            row = run.case(case)
            assert row["status"] == "failed" and row["check"] == "rounding", (manifest, row)
        assert run.case("cat-float32-contiguous-native")["status"] == "passed"
