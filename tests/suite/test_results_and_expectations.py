"""Per-case JSON lines, strict expected failures, stale entries."""

import json

import pytest

REQUIRED = {
    "id",
    "op",
    "overload",
    "dtype",
    "layout",
    "path",
    "status",
    "check",
    "max_abs_err",
    "max_rel_err",
    "duration",
    "message",
    "repro",
    "torch",
    "backend",
    "allocator",
}


def test_results_have_every_field_and_run_json(run_suite, tmp_path):
    run = run_suite(
        "--ops", "abs", "--dtypes", "float32", "--layouts", "contiguous,transposed",
        "--values", "ordinary",
    )  # fmt: skip
    assert run.returncode == 0, run.output
    assert {r["id"] for r in run.results} == {
        f"test_matches_cpu[abs-float32-{lay}-{path}]"
        for lay in ("contiguous", "transposed")
        for path in ("native", "fallback")
    }
    for row in run.results:
        assert REQUIRED <= set(row), REQUIRED - set(row)
        assert row["status"] == "passed" and row["samples"] > 0
    info = json.loads(next(tmp_path.glob("results-*/run.json")).read_text())
    assert info["backend"] == "echo_npu" and info["finished"] and info["counts"]["passed"] == 4


def _manifest(tmp_path, pattern, status="xfail", check=None):
    path = tmp_path / "manifest.toml"
    path.write_text(
        f'[[entry]]\npattern = "{pattern}"\nstatus = "{status}"\n'
        f'category = "backend-bug"\nreason = "known"\n' + (f'check = "{check}"\n' if check else "")
    )
    return str(path)


def test_unexpected_pass_fails_and_names_the_entry(run_suite, tmp_path):
    manifest = _manifest(tmp_path, "abs-float32-contiguous-*")
    run = run_suite(
        "--ops", "abs", "--dtypes", "float32", "--layouts", "contiguous", "--expectations", manifest
    )
    assert run.returncode == 1
    assert "remove this entry ('abs-float32-contiguous-*')" in run.output
    assert {r["status"] for r in run.results} == {"xpassed"}


def test_expected_failure_is_xfailed(run_suite, tmp_path):
    manifest = _manifest(tmp_path, "mul.Tensor-float32-contiguous-native")
    run = run_suite(
        "--ops",
        "mul.Tensor",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous",
        "--paths",
        "native",
        "--values",
        "ordinary",
        "--expectations",
        manifest,
        env={"ECHO_NPU_FAULTS": "leak"},
    )
    assert run.returncode == 0, run.output
    assert run.case("mul.Tensor-float32-contiguous-native")["status"] == "xfailed"


@pytest.mark.parametrize("check", ["leak", "values"])
def test_an_xfail_entry_excuses_only_the_check_it_names(run_suite, tmp_path, check):
    """The leak fault fails mul.Tensor's `leak` check: an entry pinned to `leak` xfails it, one
    pinned to `values` does not excuse it (a second bug must not hide, issue 20)."""
    manifest = _manifest(tmp_path, "mul.Tensor-float32-contiguous-native", check=check)
    args = ["--ops", "mul.Tensor", "--dtypes", "float32", "--layouts", "contiguous"]
    args += ["--paths", "native", "--values", "ordinary", "--expectations", manifest]
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "leak"})
    row = run.case("mul.Tensor-float32-contiguous-native")
    if check == "leak":
        assert run.returncode == 0 and row["status"] == "xfailed", row
        assert "not pinned" not in run.output
    else:
        assert run.returncode == 1 and row["status"] == "failed", row
        assert "expects a [values] failure: this is another one" in row["message"]


@pytest.mark.parametrize("pinned", ["own", "other"])
def test_an_xfail_entry_pinned_to_a_failure_excuses_that_failure_only(run_suite, tmp_path, pinned):
    """Issue 56: a second bug of the same check hid behind an entry matched by check name.
    An entry pinned to its failure's first line (numbers masked) excuses that failure; pinned
    to another wording of the same check, the case fails and says so."""
    args = ["--ops", "mul.Tensor", "--dtypes", "float32", "--layouts", "contiguous"]
    args += ["--paths", "native", "--values", "ordinary"]
    first = run_suite(*args, env={"ECHO_NPU_FAULTS": "leak"})
    head = first.case("mul.Tensor-float32-contiguous-native")["message"].splitlines()[0]
    from conformance.harness.expectations import failure_key

    key = failure_key(head) if pinned == "own" else "[leak] another leak, worded otherwise"
    path = tmp_path / "pinned.toml"
    path.write_text(
        '[[entry]]\npattern = "mul.Tensor-float32-contiguous-native"\nstatus = "xfail"\n'
        f'check = "leak"\nfailure = {json.dumps(key)}\ncategory = "backend-bug"\n'
        'reason = "known"\n'
    )
    run = run_suite(*args, "--expectations", str(path), env={"ECHO_NPU_FAULTS": "leak"})
    row = run.case("mul.Tensor-float32-contiguous-native")
    if pinned == "own":
        assert run.returncode == 0 and row["status"] == "xfailed", row
    else:
        assert run.returncode == 1 and row["status"] == "failed", row
        assert "failure as it words it: this is another one" in row["message"], row["message"]


def test_an_unpinned_xfail_entry_is_listed(run_suite, tmp_path):
    manifest = _manifest(tmp_path, "mul.Tensor-float32-contiguous-native")
    args = ["--ops", "mul.Tensor", "--dtypes", "float32", "--layouts", "contiguous"]
    run = run_suite(*args, "--paths", "native", "--expectations", manifest)
    assert "does not say which check fails" in run.output


def test_skip_entries_and_stale_entries(run_suite, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(
        '[[entry]]\npattern = "abs-*-native"\nstatus = "skip"\ncategory = "flaky"\n'
        'reason = "r"\n\n[[entry]]\npattern = "nothing-matches-this"\nstatus = "xfail"\n'
        'category = "flaky"\nreason = "r"\ncheck = "values"\n'
    )
    run = run_suite(
        "--ops",
        "abs",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous",
        "--expectations",
        str(path),
    )
    assert run.returncode == 0, run.output
    assert run.case("abs-float32-contiguous-native")["status"] == "skipped"
    assert run.case("abs-float32-contiguous-fallback")["status"] == "passed"
    # a narrowed run (--ops ...) cannot judge staleness: no warning
    assert "nothing-matches-this" not in run.output


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_stale_entries_are_reported_for_the_full_matrix(run_suite, tmp_path, xdist):
    path = tmp_path / "m.toml"
    path.write_text(
        'unsupported_dtypes = ["int32"]\n\n'
        '[[entry]]\npattern = "abs-float32-*"\nstatus = "skip"\ncategory = "flaky"\n'
        'reason = "r"\n\n[[entry]]\npattern = "nothing-matches-this"\nstatus = "xfail"\n'
        'category = "flaky"\nreason = "r"\n\n[[entry]]\npattern = "abs-*-native-compile"\n'
        'status = "xfail"\ncheck = "compile"\ncategory = "torch-bug"\nreason = "r"\n'
    )
    run = run_suite("-k", "abs-float32-contiguous", "--expectations", str(path), *xdist)
    assert run.returncode == 0, run.output
    assert "'nothing-matches-this'" in run.output and "matches no case of the matrix" in run.output
    assert "'abs-float32-*'" not in run.output
    # an entry for the -compile cases is not judged by a run without them (--modes)
    assert "'abs-*-native-compile'" not in run.output
    # nor an unsupported_dtypes line by a run -k kept no case of that dtype from
    assert "unsupported_dtypes 'int32'" not in run.output


def test_a_backend_that_keeps_the_privateuseone_name(run_suite, tmp_path):
    run = run_suite(
        "--ops",
        "masked_fill_.Scalar",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous,transposed",
        "--values",
        "ordinary",
        env={"ECHO_NPU_DEVICE_NAME": "privateuseone"},
    )
    assert run.returncode == 0, run.output
    assert len(run.results) == 4 and {r["status"] for r in run.results} == {"passed"}
    info = json.loads(next(tmp_path.glob("results-*/run.json")).read_text())
    assert info["device"] == "privateuseone"


def test_ops_reached_only_through_the_fallback(run_suite):
    run = run_suite(
        "--ops",
        "abs",
        "--fallback-ops",
        "nonzero",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous,transposed",
    )
    assert run.returncode == 0, run.output
    assert run.case("nonzero-float32-transposed-fallback")["status"] == "passed"
    assert not [r for r in run.results if r["op"] == "nonzero" and r["path"] == "native"]


def test_scenario_entries_are_not_judged_by_a_run_that_k_narrowed(run_suite, tmp_path):
    """-k deselects scenarios this run never sees: their entries are not stale (the entries of
    the compiled-path scenarios were reported by `-k cpp_wrapper` once)."""
    path = tmp_path / "m.toml"
    path.write_text(
        '[[entry]]\npattern = "scenario:test_aoti_package_for_the_device_matches_cpu"\n'
        'status = "xfail"\ncheck = "scenario"\ncategory = "unsupported"\nreason = "r"\n'
    )
    run = run_suite("-k", "save_load_tensors_views", "--expectations", str(path))
    assert run.returncode == 0, run.output
    assert "1 passed" in run.output, run.output[-2000:]  # the one scenario -k selects
    assert "matches no case of the matrix" not in run.output, run.output[-2000:]
