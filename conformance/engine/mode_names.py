"""The names of the execution modes beyond the forward call, and what each does: one module each
in engine/modes/, read from the folder without importing it (options and --help run without
torch): the `summary` of each module's `CaseMode` subclass, parsed from its source."""

from __future__ import annotations

import ast
import os
import pkgutil

NOT_MODES = ("base", "plain")  # the protocol and the forward call
MODES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modes")
MODES = tuple(sorted(m.name for m in pkgutil.iter_modules([MODES_DIR]) if m.name not in NOT_MODES))


def summary(mode: str) -> str:
    """The `summary` a mode's class declares (its source read, never imported), or ""."""
    with open(os.path.join(MODES_DIR, f"{mode}.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "summary" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, str):
                return value
    return ""


def modes_help(default: tuple[str, ...]) -> str:
    """The --modes help: every mode with what it does, and which run by default."""
    each = "; ".join(f"{m} ({summary(m)})" for m in MODES)
    on = ", ".join(default)
    return (
        "comma-separated execution modes beyond the forward call, or none; a case id ends in "
        f"-<mode>. Modes (a module each in engine/modes/): {each}. Default: {on}; the others "
        "run on request (docs/RESULTS.md: which cases each applies to)"
    )
