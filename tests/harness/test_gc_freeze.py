"""After collection the run's long-lived objects (items, samples, the coverage account) are moved
out of the garbage collector's reach (`gc.freeze` in session.py): pytest's five full collections
at exit and those of forked runners no longer walk them (24 s at exit at 1,388 registered
overloads, before the freeze: bench/bench_scale.py under py-spy)."""

from __future__ import annotations

from tests.helpers import run_pytest

PROBE = """
import gc


def pytest_sessionfinish(session):
    print(f"FROZEN {gc.get_freeze_count()} ITEMS {len(session.items)}")
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
