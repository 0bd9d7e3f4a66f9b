"""tests/launcher.py: a run forked by the warm launcher is the run a fresh interpreter makes, a
run whose environment could change what the launcher imported is a fresh interpreter, and a run
past its time limit is killed without taking the launcher down."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import COLD_RUNS, WARM_RUNS, clean_env, run_pytest
from tests.launcher import Launcher, same_process

RUN = ["conformance", "-p", "no:cacheprovider", "--dtypes", "float32", "--modes", "none"]
RUN += ["--isolate", "none", "--fallback-ops", "none"]


def _summary(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stdout.strip().splitlines()
    return lines[-1].split(" in ")[0] if lines else proc.stderr[-300:]


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        (["conformance", "--ops", "no_such_op"], None, 4),  # a usage error: one line
        ([*RUN, "--ops", "abs", "--values", "ordinary"], None, 0),
        ([*RUN, "--ops", "neg"], {"ECHO_NPU_FAULTS": "neg_signed_zero"}, 1),
    ],
    ids=["usage-error", "tiny-run", "planted-fault"],
)
def test_a_warm_run_is_the_run_of_a_fresh_interpreter(args, env, code, monkeypatch, tmp_path):
    args = [*args, "--results", str(tmp_path / "warm")]
    warm = run_pytest(*args, env=env)
    assert warm.returncode == code, warm.stdout[-2000:] + warm.stderr[-2000:]
    assert WARM_RUNS.launcher is not None and WARM_RUNS.launcher.alive()
    monkeypatch.setenv(COLD_RUNS, "1")
    cold = run_pytest(*args[:-1], str(tmp_path / "cold"), env=env)
    assert (warm.returncode, _summary(warm)) == (cold.returncode, _summary(cold)), (
        warm.stdout[-2000:] + warm.stderr[-2000:]
    )
    assert warm.stderr == cold.stderr  # nothing a fresh interpreter does not print either


def test_only_the_suites_and_echo_npus_variables_may_differ():
    base = {"PATH": "/bin", "PYTHONPATH": "/a"}
    assert same_process({**base, "CONFORMANCE_BACKEND": "x", "ECHO_NPU_FAULTS": "y"}, base)
    assert same_process({**base, "PYTEST_CURRENT_TEST": "t (call)"}, base)
    for changed in ({"PYTHONPATH": "/b"}, {"LD_PRELOAD": "libasan.so"}, {"TORCH_LOGS": "+dynamo"}):
        assert not same_process({**base, **changed}, base), changed
    assert not same_process({"PATH": "/bin"}, base)  # one unset is a difference too


def test_a_run_past_its_limit_is_killed_and_the_launcher_serves_on(tmp_path):
    slow = tmp_path / "test_slow.py"
    slow.write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    launcher = Launcher(clean_env())
    try:
        out, err = tmp_path / "out", tmp_path / "err"
        with pytest.raises(TimeoutError):
            launcher.run([str(slow), "-p", "no:cacheprovider"], clean_env(), out, err, 3)
        assert launcher.alive()
        quick = tmp_path / "test_quick.py"
        quick.write_text("import os\n\ndef test_env():\n    assert os.environ['X_SEEN'] == '1'\n")
        env = {**clean_env(), "CONFORMANCE_X": "1", "X_SEEN": "1"}
        assert launcher.run([str(quick), "-p", "no:cacheprovider"], env, out, err, 60) == 0
        assert "1 passed" in out.read_text()
    finally:
        launcher.close()
    assert launcher.process.returncode == 0
    assert not os.path.exists(f"/proc/{launcher.process.pid}")
