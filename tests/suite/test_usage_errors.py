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
        (["--shard", "5/4"], "--shard '5/4': give K/N, shard K of N with 1 <= K <= N"),
        (["--shard-durations", "."], "--shard-durations balances shards: give --shard K/N too"),
        (
            ["--shard", "1/2", "--shard-durations", "no/such/dir"],
            "--shard-durations: results folder no/such/dir does not exist",
        ),
    ],
)
def test_bad_option_is_one_line(run_suite, args, message):
    run = run_suite(*args)
    assert run.returncode == 4, run.output
    assert message in run.output
    assert "Traceback" not in run.output


def test_shard_durations_from_this_runs_own_results_is_one_line(run_suite, tmp_path):
    """The run clears its --results at the start: xdist workers would read other durations than
    the controller and partition differently."""
    run = run_suite("--shard", "1/2", "--shard-durations", str(tmp_path / "results-0"))
    assert run.returncode == 4
    assert "that is this run's --results folder, which the run clears" in run.output
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
    assert "status 'sometimes' is not one of xfail, unsupported, skip, crash" in run.output
    assert "Traceback" not in run.output
