"""This process: its row of the process table (kinds.py), set once when it starts, in place of
switches each module kept (how it forks, whether captures fork, whether it is a forked runner).
A forked child gets its row from the launcher at the fork (launch.py); a spawned child reads it
from `KIND_ENV`, which the launcher sets; a process the user started is `pytest` (an xdist
controller or worker learns its role from pytest: harness/roles.py). What follows from the row:
a kind that never forks sends its CPU tasks to a task zygote (forker.py `Forker`), and a kind
that runs cases captures samples in place (samples/guarded.py: a crash there already costs one
case)."""

from __future__ import annotations

import os
from typing import Any

from conformance.processes import kinds

#: the kind of a child the launcher started, in its environment
KIND_ENV = "CONFORMANCE_PROCESS_KIND"


class ThisProcess:
    """A process's row, and the one link it was given for its CPU tasks (a forked runner's:
    the task zygote its runner zygote keeps)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or os.environ.get(KIND_ENV) or "pytest"
        self.tasks_from: Any = None  # a ZygoteLink to ask for a task link (None: start one)

    @property
    def kind(self) -> kinds.Kind:
        return kinds.kind(self.name)

    def became(self, name: str) -> None:
        """In a child the launcher just forked: its row from now on."""
        self.name = name
        os.environ[KIND_ENV] = name
        self.tasks_from = None

    def known_as(self, name: str) -> None:
        """A process the user started learns its row from pytest (an xdist controller or
        worker); a process the launcher started keeps the row it was started as."""
        if self.launched() is None:
            self.name = name

    def launched(self) -> str | None:
        """The kind the launcher started this process as (None: the user started it)."""
        return os.environ.get(KIND_ENV)


THIS = ThisProcess()
