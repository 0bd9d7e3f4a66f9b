"""Every check can be switched off by tests/meta/ablation.py (so ablate_checks.py proves some
self-test notices it), and switching one off really removes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.meta.ablation import ABLATIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_check_can_be_ablated() -> None:
    from conformance.engine import runner  # noqa: F401 - registers the checks of bits.py
    from conformance.engine.checks import CHECKS

    assert {"rounding", "signed-zero", "subnormal"} <= {c.name for c in CHECKS}
    assert {c.name for c in CHECKS} <= set(ABLATIONS)


def test_ablating_a_check_turns_it_into_a_no_op() -> None:
    code = (
        "from tests.meta.ablation import ABLATIONS\n"
        "from conformance.engine import checks\n"
        "ABLATIONS['identity']()\n"
        "check = next(c for c in checks.CHECKS if c.name == 'identity')\n"
        "assert check.run(None) is None\n"
    )
    _passes_in_a_fresh_process(code)


def test_every_ablation_finds_what_it_switches_off() -> None:
    """An ablation whose target moved (a module split: harness/runners.py's runner side went to
    serving.py) raises instead of switching anything off, and the self-test meant to notice it
    proves nothing: each is applied once, in a fresh process."""
    code = (
        "from tests.meta.ablation import ABLATIONS\n"
        "bad = []\n"
        "for name, off in ABLATIONS.items():\n"
        "    try:\n"
        "        off()\n"
        "    except Exception as exc:\n"
        "        bad.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "assert not bad, bad\n"
    )
    _passes_in_a_fresh_process(code)


def _passes_in_a_fresh_process(code: str) -> None:
    """`code` in a fresh interpreter (an ablation patches the modules it runs in)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
