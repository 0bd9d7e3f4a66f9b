"""Which process of a run this is: a row of the process table (processes/kinds.py) that
schedules, runs or serves cases. Each role runs and writes different things (`session.py`);
what each may do is read from its row (`Role.kind`)."""

from __future__ import annotations

from enum import Enum

import pytest

from conformance.processes import kinds
from conformance.processes.this import THIS


class Role(Enum):
    """Which process this is: the name of its row in processes/kinds.py."""

    SINGLE = "pytest"  # plain pytest: runs the cases (itself or in runner processes), writes
    XDIST_CONTROLLER = "xdist-controller"  # runs nothing; reports workers that crashed or hung
    XDIST_WORKER = "xdist-worker"  # runs its share of the cases, writes cases-<gwN>.jsonl
    FORKED_CHILD = "runner"  # runs cases for its parent; writes nothing
    SPAWNED_RUNNER = "spawned-runner"  # a fresh pytest running cases for its parent; no writes
    ZYGOTE = "runner-zygote"  # a fresh pytest that forks runners (harness/zygotes.py); no case

    @property
    def kind(self) -> kinds.Kind:
        return kinds.kind(self.value)


def role_of(config: pytest.Config) -> Role:
    """The role of this process (a forked runner knows itself: processes/this.py)."""
    spawned = THIS.launched()  # the launcher names a spawned pytest's role
    if spawned in (Role.SPAWNED_RUNNER.value, Role.ZYGOTE.value):
        return Role(spawned)
    if hasattr(config, "workerinput"):
        return Role.XDIST_WORKER
    if config.pluginmanager.has_plugin("dsession"):
        return Role.XDIST_CONTROLLER
    return Role.SINGLE
