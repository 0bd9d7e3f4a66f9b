"""Execution modes as plug-ins: every module of this folder registers one `CaseMode`
(base.py: the protocol and the registry); a new mode is one module (and its docs).

`mode_of(values)`: the mode of a case id's last part (the plain forward call for an ordinary case
or a value set); `selected(names)`: the modes --modes names, in the order their cases are built.
"""

from __future__ import annotations

import importlib
import pkgutil

from conformance.engine.modes.base import REGISTRY, CaseMode, CaseRequest, ModeScope, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ("CaseMode", "CaseRequest", "ModeScope", "mode_of", "register", "selected")


def mode_of(values: str) -> CaseMode:
    """The mode of a case id's last part: a registered mode, else the forward call."""
    return REGISTRY.get(values) or REGISTRY[""]


def selected(names: list[str] | tuple[str, ...], key: str = "case_rank") -> list[CaseMode]:
    """The registered modes among `names`, ordered by `key` (case_rank or account_rank)."""
    chosen = [m for n, m in REGISTRY.items() if n and n in names]
    return sorted(chosen, key=lambda m: getattr(m, key))
