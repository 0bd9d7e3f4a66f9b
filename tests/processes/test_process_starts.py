"""Every process the suite starts goes through processes/launch.py, as a kind of the table
(processes/kinds.py): a fork goes on through processes/forking.py, which refuses a process with
threads (issue 55), and the fork audit (CONFORMANCE_FORK_AUDIT) sees each one, so
tests/suite/test_real_accelerators.py can assert that no process forked with threads."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conformance.processes import forking, launch
from conformance.processes.kinds import KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "conformance"
ALLOWED = {PACKAGE / "processes" / "launch.py", PACKAGE / "processes" / "forking.py"}
START = re.compile(
    r"\bsubprocess\.(run|Popen|call|check_call|check_output|getoutput|getstatusoutput)\("
    r"|\bos\.(fork|forkpty|system|popen|posix_spawnp?|spawn[lv]p?e?|exec[lv]p?e?)\("
    r"|\bmultiprocessing\.(Process|Pool)\(|get_context\(|\bpty\.fork\(|create_subprocess_"
    r"|\bforking\.fork\("
)


def _starts(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if START.search(line)]


def test_no_module_starts_a_process_but_the_launcher():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in ALLOWED
        for n in _starts(path.read_text())
    ]
    assert not found, f"a process started outside processes/launch.py (use launch.*): {found}"


def test_the_guard_sees_a_planted_start():
    planted = (
        "import subprocess, os\n"
        "proc = subprocess.Popen([sys.executable, '-m', 'x'])\n"
        "pid = os.fork()\n"
        "done = subprocess.run(['gcc'])\n"
        "annotated: subprocess.Popen | None = None\n"
    )
    assert _starts(planted) == [2, 3, 4]


def test_a_start_its_row_does_not_allow_is_refused():
    with pytest.raises(launch.LaunchRefused, match="started by fork"):
        launch.spawn("runner", ["-c", "pass"])
    with pytest.raises(launch.LaunchRefused, match="started by spawn"):
        launch.fork("spawned-runner")
    with pytest.raises(KeyError):
        launch.run("no-such-kind", ["-c", "pass"])


def test_a_spawned_child_knows_its_kind_and_the_pinned_interpreter():
    code = "import os, sys; print(os.environ['CONFORMANCE_PROCESS_KIND'], sys.executable)"
    done = launch.run("tool", ["-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["tool", sys.executable]


def test_every_parent_is_a_kind_and_every_kind_is_started_somehow():
    names = {k.name for k in KINDS}
    for k in KINDS:
        assert set(k.parents) <= names, k.name
        assert k.start in ("fork", "spawn", "fork or spawn", "user", "user or spawn"), k.name
        assert bool(k.parents) == (k.start != "user"), k.name


def test_the_rule_refuses_a_process_with_threads():
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forking.refusal() is not None
        with pytest.raises(forking.ForkRefused, match="threads"):
            forking.fork("test")
    finally:
        stop.set()
        thread.join()


def test_a_start_the_table_does_not_declare_is_named():
    from conformance.processes.kinds import misfit

    assert misfit("runner-zygote", "fork", "runner") is None
    assert misfit("xdist-worker", "spawn", "runner-zygote") is None
    assert "whose row names only" in misfit("runner", "spawn", "runner-zygote")
    assert "never forks" in misfit("xdist-worker", "fork", "runner-zygote")
    assert "not a kind" in misfit("someone", "spawn", "runner")
