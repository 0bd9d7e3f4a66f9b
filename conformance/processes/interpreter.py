"""The interpreter of every child process the suite starts (probes, spawned runners, replays).

A child is always this interpreter (`sys.executable`) with an environment pinned to what the
suite started with: a backend's native runtime may change the process environment at C level
(`setenv`, which `os.environ` does not see and every child inheriting the C environment does),
e.g. `PYTHONEXECUTABLE` pointing at the first `python3` on PATH, which turns a venv's
interpreter into the system one ("No module named 'conformance'"). So the suite's own
children never inherit the C environment: they get `os.environ` (what the suite itself set
included) with the interpreter-selecting variables restored to their values when `conformance`
was first imported; and after the backend is loaded `pin()` restores them in the C environment
too, for the children others start (pytest-xdist's workers, multiprocessing).
No torch import here: `conformance/__init__.py` imports this module to take that snapshot before
any backend loads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import MappingProxyType

#: variables that choose which Python a child is, or where it finds its modules
PINNED = (
    "PYTHONEXECUTABLE",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONSAFEPATH",
    "PYTHONPLATLIBDIR",
    "VIRTUAL_ENV",
)
#: their values when the suite started (None: unset); read-only
AT_START: Mapping[str, str | None] = MappingProxyType({k: os.environ.get(k) for k in PINNED})


def python() -> list[str]:
    """The command that starts a child interpreter: this one."""
    return [sys.executable]


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: `os.environ`, the interpreter-selecting variables as they
    were at the suite's start, then `extra`."""
    env = dict(os.environ)
    for name, value in AT_START.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env.update(extra or {})
    return env


def pin() -> None:
    """Restore the interpreter-selecting variables of the C environment (what children started
    by other libraries inherit) to their values at the suite's start."""
    for name, value in AT_START.items():
        if value is None:
            os.unsetenv(name)
        else:
            os.putenv(name, value)


def describe() -> str:
    """The interpreter children run, for error messages."""
    return sys.executable


def quiet_blas() -> None:
    """numpy's OpenBLAS thread server stays off in this process and its children (unless the
    user set it): a process with threads may not fork (processes/forking.py)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
