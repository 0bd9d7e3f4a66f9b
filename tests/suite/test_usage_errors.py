"""Bad input gets one clear line naming the fix, never a traceback."""

import pytest


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "no_such_backend"], "backend module 'no_such_backend' is not importable"),
        (["--dtypes", "float33"], "unknown dtype 'float33'; valid: float64"),
        (["--layouts", "diagonal"], "unknown layout(s) diagonal; valid: contiguous"),
        (["--paths", "both"], "unknown path(s) both; valid: native, fallback"),
        (["--ops", "frobnicate.*"], "--ops: frobnicate.* matches no overload registered"),
    ],
)
def test_bad_option_is_one_line(run_suite, args, message):
    run = run_suite(*args)
    assert run.returncode == 4, run.output
    assert message in run.output
    assert "Traceback" not in run.output


def test_bad_backend_env_value_is_one_line(run_suite):
    run = run_suite(env={"ECHO_NPU_ALLOCATOR": "jemalloc"})
    assert run.returncode == 4
    assert "ECHO_NPU_ALLOCATOR" in run.output and "malloc" in run.output
    assert "Traceback" not in run.output


def test_malformed_manifest_is_one_line(run_suite, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[entry]]\npattern = 'abs-*'\nstatus = 'sometimes'\n")
    run = run_suite("--expectations", str(bad))
    assert run.returncode == 4
    assert "status 'sometimes' is not one of xfail, skip, crash" in run.output
    assert "Traceback" not in run.output
