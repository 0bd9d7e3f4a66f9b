"""What torch or the backend warns stays out of the terminal: a case's warnings in its record
(and a count in the summary), the suite's own CPU work's in one summary line and run.json."""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.engine.checks import invoke
from conformance.engine.held_stderr import CPP_WARNING, HeldStderr, cpp_warnings, quiet
from conformance.engine.placing import Materialized
from conformance.harness.case_warnings import captured, recorded
from tests.helpers import run_pytest

LINE = "[W1129 21:55:38.906107180 Resize.cpp:30] Warning: An output was resized (function f)"


def _records(folder: Path) -> dict[str, dict]:
    rows = [
        json.loads(ln) for f in folder.glob("cases-*.jsonl") for ln in f.read_text().splitlines()
    ]
    return {r["id"]: r for r in rows}


def test_a_kernels_warning_is_in_its_record_and_the_summary_not_the_terminal(tmp_path) -> None:
    args = ("conformance", "--ops", "neg", "--dtypes", "float32", "--layouts", "contiguous",
            "--paths", "native", "--modes", "none", "-p", "no:cacheprovider")  # fmt: skip
    run = run_pytest(*args, "--results", str(tmp_path / "r"), env={"ECHO_NPU_FAULTS": "neg_warns"})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    record = _records(tmp_path / "r")["test_matches_cpu[neg-float32-contiguous-native]"]
    (warned,) = record["warnings"]
    assert "neg ran on the slow path (fault neg_warns)" in warned["message"]
    assert warned["count"] >= 1
    assert re.search(r"warnings: \d+ case\(s\) warned, 1 distinct warning", output)
    assert not [ln for ln in output.splitlines() if CPP_WARNING.match(ln.strip())]
    assert (
        "slow path"
        not in output.replace(record["warnings"][0]["message"], "", 1).split("most often")[0]
    )  # only the summary's line names it
    clean = run_pytest(*args, "--results", str(tmp_path / "c"))
    assert (
        "warnings"
        not in _records(tmp_path / "c")["test_matches_cpu[neg-float32-contiguous-native]"]
    )
    assert "case(s) warned" not in clean.stdout


def test_held_stderr_tallies_warnings_and_gives_back_the_rest(capfd) -> None:
    held = HeldStderr()
    with held.held():
        with held.held():  # nested: one hold
            os.write(2, f"{LINE}\nsomething else\n".encode())
    assert held.tally == cpp_warnings(LINE) and sum(held.tally.values()) == 1
    err = capfd.readouterr().err
    assert "something else" in err and "Resize.cpp" not in err


def test_a_warning_of_several_lines_is_held_whole(capfd) -> None:
    """torch's deprecation notes (torch.cholesky, torch.triangular_solve) have newlines in their
    text: c10's handler writes the header, the lines, then ` (function f)` on the last. Seen on
    torch_xla's collection: the header was tallied and the other lines reached the terminal."""
    several = (
        "[W1201 10:00:00.1 BatchLinearAlgebra.cpp:1] Warning: torch.cholesky is deprecated.\n"
        "L = torch.cholesky(A)\nshould be replaced with\nL = torch.linalg.cholesky(A)"
        " (function operator())\n"
    )
    unended = "[W1201 10:00:00.1 X.cpp:2] Warning: an old handler's line\nthe user's own line\n"
    held = HeldStderr()
    with held.held():
        os.write(2, (several + unended + LINE + "\n").encode())
    assert held.tally[("c10", "torch.cholesky is deprecated. L = torch.cholesky(A) should be "
                              "replaced with L = torch.linalg.cholesky(A)")] == 1  # fmt: skip
    assert held.tally[("c10", "an old handler's line")] == 1
    assert sum(held.tally.values()) == 3
    err = capfd.readouterr().err
    assert "the user's own line" in err  # no ` (function f)` follows: not the warning's text
    assert "cholesky" not in err and "should be replaced" not in err


def test_the_users_warning_filters_still_apply_in_a_case() -> None:
    config = SimpleNamespace(
        getini=lambda name: [],
        known_args_namespace=SimpleNamespace(pythonwarnings=["error::UserWarning"]),
    )
    with pytest.raises(UserWarning), captured(config):
        warnings.warn("asked to be an error", UserWarning, stacklevel=1)
    plain = SimpleNamespace(getini=lambda name: [],
                            known_args_namespace=SimpleNamespace(pythonwarnings=None))  # fmt: skip
    with captured(plain) as tally:
        warnings.warn("kept", UserWarning, stacklevel=1)
        print(LINE, file=sys.stderr)  # read back where fd 2 is a file (a runner's log)
    assert tally[("UserWarning", "kept")] == 1


def test_a_device_calls_warning_is_the_cases_and_cpus_reference_stays_quiet() -> None:
    """`invoke` under a case's recording: what the device call warns is recorded (and raises
    where the user's -W asks), what CPU's reference warns is not (torch's, not the device's)."""

    def warns(text: str) -> int:
        warnings.warn(text, UserWarning, stacklevel=1)
        return 1

    call = Materialized(args=(), kwargs={}, bases=[])
    with recorded() as tally:
        assert invoke(lambda: warns("from the device"), call, device=True).result == 1
        assert invoke(lambda: warns("from cpu"), call).result == 1
    assert tally == {("UserWarning", "from the device"): 1}
    with recorded(cli=["error::UserWarning"]) as tally:
        raised = invoke(lambda: warns("an error"), call, device=True).exc
        assert invoke(lambda: warns("from cpu"), call).result == 1
    assert isinstance(raised, UserWarning) and not tally
    with warnings.catch_warnings(record=True) as outside:  # no case recording: quiet both ways
        warnings.simplefilter("always")
        invoke(lambda: warns("not in a case"), call, device=True)
    assert not outside


def test_a_warning_torch_gives_once_a_process_is_recorded_in_every_case_that_warns_it() -> None:
    """c10's TORCH_WARN_ONCE ("ComplexHalf support is experimental") warns once per process:
    the first case that triggered it had it in its record, the next ones not, and which case
    was first depended on the process's history (a cold run's capture took it). In a case's
    recording it warns every time; outside, torch's own setting is back."""
    import torch

    call = Materialized(args=(), kwargs={}, bases=[])
    complex_half = lambda: torch.empty(2, dtype=torch.complex32)  # noqa: E731
    for _ in range(2):
        with recorded() as tally:
            invoke(complex_half, call, device=True)
        assert any("ComplexHalf support is experimental" in m for _, m in tally), tally
    assert not torch.is_warn_always_enabled()


@pytest.mark.parametrize("swap", [True, False], ids=["filters-swapped", "catch_warnings"])
def test_quiet_ignores_every_warning_and_puts_the_callers_filters_back(monkeypatch, swap) -> None:
    """`quiet()` (CPU's reference calls): no warning escapes it, Python's or torch's C++ one,
    even where the caller turns warnings into errors; the caller's filters are back after it,
    also when the block raises. Where Python lacks `_filters_mutated` (the swap's hook), it
    is catch_warnings itself."""
    import torch

    from conformance.engine import held_stderr

    if not swap:
        monkeypatch.setattr(held_stderr, "_FILTERS_MUTATED", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = list(warnings.filters)
        with quiet():
            warnings.warn("python's", UserWarning, stacklevel=1)
            torch.add(torch.ones(2), 1, out=torch.empty(3))  # C++: "An output ... was resized"
        assert warnings.filters == before
        with pytest.raises(KeyError), quiet():
            raise KeyError("the call raised")
        assert warnings.filters == before
        with pytest.raises(UserWarning):
            warnings.warn("the caller's filters again", UserWarning, stacklevel=1)


def test_a_workers_capture_warnings_reach_the_controllers_line_and_run_json(monkeypatch) -> None:
    """Under xdist the samples are captured in the workers: each sends its tally at its end
    through xdist's workeroutput, and the controller's summary line and run.json count it."""
    from conformance.engine import held_stderr
    from conformance.harness import case_warnings
    from conformance.harness.case_warnings import QuietSetup

    worker_held = HeldStderr()
    worker_held.tally.update(cpp_warnings(LINE) + cpp_warnings(LINE))
    monkeypatch.setattr(case_warnings, "HELD", worker_held)
    output: dict = {}
    QuietSetup().pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace(workeroutput=output)))
    sent = json.loads(json.dumps(output))  # what execnet carries: lists, strings, numbers

    monkeypatch.setattr(case_warnings, "HELD", held_stderr.HeldStderr())  # the controller's
    controller = QuietSetup()
    assert controller.summary_line() is None
    controller.pytest_testnodedown(SimpleNamespace(workeroutput=sent), None)
    controller.pytest_testnodedown(SimpleNamespace(workeroutput={}), "died")  # sent nothing
    assert "torch warned 2 time(s) on CPU" in (controller.summary_line() or "")
    assert controller.to_json()[0]["count"] == 2
