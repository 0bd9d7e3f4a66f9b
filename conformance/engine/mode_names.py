"""The names of the execution modes beyond the forward call: one module each in engine/modes/,
read from the folder without importing it (options and --help run without torch)."""

from __future__ import annotations

import os
import pkgutil

NOT_MODES = ("base", "plain")  # the protocol and the forward call
MODES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modes")
MODES = tuple(sorted(m.name for m in pkgutil.iter_modules([MODES_DIR]) if m.name not in NOT_MODES))
