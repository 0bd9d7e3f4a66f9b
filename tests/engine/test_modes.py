"""Execution modes as plug-ins (engine/modes/): one module each, found by the registry and by
--modes without torch, and nothing else in the package naming a mode of its own."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.engine import modes
from conformance.engine.mode_names import MODES
from conformance.engine.modes.base import REGISTRY
from conformance.harness.options import DEFAULT_MODES

PKG = Path(__file__).resolve().parents[2] / "conformance"


def test_every_mode_module_registers_its_mode_and_options_know_them_without_torch() -> None:
    assert set(REGISTRY) == {"", *MODES}
    assert set(DEFAULT_MODES) <= set(MODES)
    assert modes.mode_of("special") is modes.mode_of("") is REGISTRY[""]  # value sets: plain
    for key in ("case_rank", "account_rank"):
        ranks = [getattr(m, key) for n, m in REGISTRY.items() if n]
        assert len(set(ranks)) == len(ranks), key


def test_a_mode_is_one_file() -> None:
    """The -repeat mode landed as engine/modes/repeat.py alone: no other module of the package
    names it (the registry, --modes, the case list, the account, the runner ask the mode)."""
    named = [
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if p.name != "repeat.py" and re.search(r"[\"']repeat[\"']", p.read_text())
    ]
    assert named == []
