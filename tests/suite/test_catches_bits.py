"""The checks of the last bit (engine/bits.py) catch each of echo_npu's four last-bit faults in
every float dtype it touches, as the named check, and echo_npu without them passes the same
cases: a sign of zero, a flushed subnormal, a product one ulp toward zero on ordinary values
(and with a float64 CPU scalar), a conversion to bfloat16 that truncates."""

import pytest

FLOATS = ("float32", "float64", "float16", "bfloat16")
ARGS = ["--dtypes", ",".join(FLOATS), "--layouts", "contiguous", "--paths", "native"]

FAULTS = {
    # fault: (ops, dtypes that must fail, case suffix, check, text in the message)
    "neg_signed_zero": ("neg", FLOATS, "-special", "signed-zero", "zero(s) of the other sign"),
    "add_flushes_subnormals": (
        "add.Tensor",
        FLOATS,
        "-special",
        "subnormal",
        "flushes subnormal results to zero",
    ),
    "mul_rounds_toward_zero": (
        "mul.Tensor",
        FLOATS,
        "",  # ordinary values, not only an overflow in -special
        "rounding",
        "1 ulp toward zero on",
    ),
    # the conversion into bfloat16 from every other float dtype (bfloat16 itself converts none)
    "to_bf16_truncates": (
        "_copy_from",
        ("float32", "float64", "float16"),
        "",
        "rounding",
        "cpu is exact for _copy_from in",
    ),
}
OPS = ",".join(ops for ops, *_ in FAULTS.values())


def test_echo_npu_without_faults_passes_every_last_bit_check(run_suite):
    run = run_suite("--ops", OPS, *ARGS)
    assert run.returncode == 0, run.output
    assert not run.failed()
    # the cases the faults below fail were compared, not skipped
    for ops, dtypes, suffix, _, _ in FAULTS.values():
        for dtype in dtypes:
            assert run.case(f"{ops}-{dtype}-contiguous-native{suffix}")["status"] == "passed"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_last_bit_fault_fails_every_dtype_it_touches(run_suite, fault):
    ops, dtypes, suffix, check, text = FAULTS[fault]
    run = run_suite("--ops", ops, *ARGS, env={"ECHO_NPU_FAULTS": fault})
    assert run.returncode == 1, run.output
    for dtype in dtypes:
        row = run.case(f"{ops}-{dtype}-contiguous-native{suffix}")
        assert row["status"] == "failed" and row["check"] == check, row
        assert text in row["message"], row["message"]
    assert {r["check"] for r in run.failed()} == {check}


def test_rounding_names_the_direction_and_cpu_s_exactness(run_suite):
    run = run_suite("--ops", "mul.Tensor", *ARGS, env={"ECHO_NPU_FAULTS": "mul_rounds_toward_zero"})
    message = run.case("mul.Tensor-float16-contiguous-native")["message"]
    assert "round-toward-zero?" in message
    assert "cpu is exact for mul.Tensor in float16: correctly rounded on" in message
    # a float64 0-dim CPU operand (taken in float by CPU, one rounding): caught too
    row = run.case("mul.Tensor-float16-contiguous-native-promotion")
    assert row["status"] == "failed" and row["check"] == "rounding", row


def test_a_declared_flush_is_judged_against_cpu_flushed(run_suite, tmp_path):
    manifest = tmp_path / "ftz.toml"
    manifest.write_text('flushes_subnormals = ["float32", "float16"]\n')
    faulty = {"ECHO_NPU_FAULTS": "add_flushes_subnormals"}
    run = run_suite("--ops", "add.Tensor", *ARGS, "--expectations", str(manifest), env=faulty)
    for dtype, status in (("float32", "passed"), ("float16", "passed"), ("float64", "failed")):
        assert run.case(f"add.Tensor-{dtype}-contiguous-native-special")["status"] == status
    assert run.case("add.Tensor-float64-contiguous-native-special")["check"] == "subnormal"
    # the declaration permits, it does not demand: a device that keeps subnormals passes
    clean = run_suite("--ops", "add.Tensor", *ARGS, "--expectations", str(manifest))
    assert clean.returncode == 0 and not clean.failed(), clean.output


def test_a_broken_flush_declaration_is_one_line_naming_the_fix(run_suite, tmp_path):
    manifest = tmp_path / "bad.toml"
    manifest.write_text('flushes_subnormals = ["int32"]\n')
    run = run_suite("--ops", "add.Tensor", "--expectations", str(manifest))
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "flushes_subnormals must list dtype names (float16, bfloat16, float32, float64)" in (
        run.output
    )


def test_a_python_to_copy_is_exact_and_its_truncation_caught(run_suite):
    """tests/backends/pyconvert_backend.py: echo_npu with a `_to_copy` written in Python, as a
    wrapper backend converts. Right, it passes every case; truncating float -> bfloat16, the
    conversion cases into bfloat16 fail as `rounding` (before: only float64 targets were built,
    and every case passed)."""
    from pathlib import Path

    backends = str(Path(__file__).resolve().parents[1] / "backends")
    args = ("--backend", "pyconvert_backend", "--ops", "_to_copy", "--layouts", "contiguous")
    right = run_suite(*args, env={"PYTHONPATH": backends})
    assert right.returncode == 0 and not right.failed(), right.output
    wrong = run_suite(*args, env={"PYTHONPATH": backends, "PYCONVERT_TRUNCATE_BF16": "1"})
    failed = {(r["dtype"], r["check"]) for r in wrong.failed()}
    assert failed == {(d, "rounding") for d in ("float32", "float64", "float16")}, failed
