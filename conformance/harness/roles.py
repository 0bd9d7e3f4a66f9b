"""Which process of a run this is: a plain pytest process, an xdist controller or worker, a
case runner (forked by a zygote, or a spawned interpreter) or a zygote; each role runs and
writes different things (`session.py`)."""

from __future__ import annotations

import os
from enum import Enum

import pytest

from conformance.harness.runners import RUNNER_ENV


class Role(Enum):
    """Which process this is."""

    SINGLE = "single"  # plain pytest: runs the cases (itself or in runner processes), writes
    XDIST_CONTROLLER = "xdist-controller"  # runs nothing; reports workers that crashed or hung
    XDIST_WORKER = "xdist-worker"  # runs its share of the cases, writes cases-<gwN>.jsonl
    FORKED_CHILD = "forked-child"  # runs cases for its parent; writes nothing
    SPAWNED_RUNNER = "spawned-runner"  # a fresh pytest running cases for its parent; no writes
    ZYGOTE = "zygote"  # a fresh pytest that forks runners (harness/zygotes.py); runs no case


def role_of(config: pytest.Config) -> Role:
    """The role of this process (a forked child knows itself: `ConformanceRun.forked_child`)."""
    if RUNNER_ENV in os.environ:
        return Role.ZYGOTE if '"zygote"' in os.environ[RUNNER_ENV] else Role.SPAWNED_RUNNER
    if hasattr(config, "workerinput"):
        return Role.XDIST_WORKER
    if config.pluginmanager.has_plugin("dsession"):
        return Role.XDIST_CONTROLLER
    return Role.SINGLE
