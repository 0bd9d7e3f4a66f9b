"""Every fork the suite makes goes through engine/forking.py (issue 55): it refuses a process
that has threads, and the fork audit (CONFORMANCE_FORK_AUDIT) sees each one, so
tests/suite/test_real_accelerators.py can assert that no process forked with threads."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "conformance"
ALLOWED = {PACKAGE / "engine" / "forking.py"}
FORK = re.compile(r"\bos\.fork\(|\bos\.forkpty\(|multiprocessing\.Process\(|get_context\(\"fork")


def test_no_module_forks_but_engine_forking():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in ALLOWED
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FORK.search(line)
    ]
    assert not found, f"fork outside engine/forking.py (use forking.fork or a zygote): {found}"


def test_the_rule_refuses_a_process_with_threads():
    import threading

    from conformance.engine import forking

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forking.refusal() is not None
        try:
            forking.fork("test")
        except forking.ForkRefused as exc:
            assert "threads" in str(exc)
        else:
            raise AssertionError("forked a process with two threads")
    finally:
        stop.set()
        thread.join()
