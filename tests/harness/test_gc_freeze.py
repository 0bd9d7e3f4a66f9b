"""After collection the run's long-lived objects (items, samples, the coverage account) are moved
out of the garbage collector's reach (`gc.freeze` in session.py): pytest's five full collections
at exit and those of forked runners no longer walk them (24 s at exit at 1,388 registered
overloads, before the freeze: bench/bench_scale.py under py-spy). The xdist controller, which
collects nothing, freezes at the session's start; a forked child (launch.fork) freezes what it
inherited, its parent's imports since the last freeze included."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, run_pytest

PROBE = """
import gc


def pytest_sessionfinish(session):
    print(f"FROZEN {gc.get_freeze_count()} ITEMS {len(session.items)}")
"""

SUMMARY_PROBE = """
import gc


def pytest_terminal_summary(terminalreporter):  # the xdist controller's alone
    terminalreporter.write_line(f"FROZEN {gc.get_freeze_count()}")
"""


def test_collected_objects_are_frozen(tmp_path) -> None:
    (tmp_path / "freeze_probe.py").write_text(PROBE)
    proc = run_pytest(
        "conformance",
        "--collect-only",
        *"--ops abs --dtypes float32 --results none -p freeze_probe".split(),
        env={"PYTHONPATH": str(tmp_path)},
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FROZEN"))
    frozen, items = int(line.split()[1]), int(line.split()[3])
    assert items > 0 and frozen > 10_000, proc.stdout[-2000:]


def test_the_xdist_controller_freezes_what_it_imported(tmp_path) -> None:
    """It collects nothing (xdist's workers do; with --collect-only xdist stays out), so it
    freezes at the session's start (torch, the suite): its collections while the reports come
    in, and pytest's at exit, walked them otherwise (about a second of a default run)."""
    (tmp_path / "summary_probe.py").write_text(SUMMARY_PROBE)
    proc = run_pytest(
        "conformance",
        *"-n 1 --ops abs --dtypes float32 -k contiguous-native] --results none".split(),
        *"-p summary_probe".split(),
        env={"PYTHONPATH": str(tmp_path)},
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FROZEN")), "FROZEN ?")
    assert line.split()[1].isdigit() and int(line.split()[1]) > 10_000, proc.stdout[-2000:]


CHILD = """
import gc, os
from conformance.processes import launch

made_since = [[i] for i in range(50_000)]  # what a zygote imports after its last freeze
frozen = gc.get_freeze_count()
pid = launch.fork("runner")
if pid == 0:
    os._exit(0 if gc.get_freeze_count() >= frozen + len(made_since) else 1)
_, status = os.waitpid(pid, 0)
print("CHILD", os.waitstatus_to_exitcode(status), "PARENT", gc.get_freeze_count() - frozen)
"""


def test_a_forked_child_freezes_the_heap_it_inherited() -> None:
    """launch.fork: a runner's full collections walked the zygote's imports (torch._dynamo) and
    every case's garbage beside them; the parent's heap is left as it was."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert "CHILD 0 PARENT 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]
