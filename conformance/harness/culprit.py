"""Culprit search: which earlier case corrupted the memory a crash was detected in.

A kernel that writes past its output can pass all its own checks and leave glibc's heap
damaged; the abort comes at some later malloc or free, in whichever case runs next (the seed
report: a `masked_fill_` bug that crashed in `aten::all`). When a case crashes in a runner that
had run other cases first, the search replays in fresh runners (`runners.py`, `replay`):

1. the crashed case alone: if it crashes, the crash is its own;
2. the last `WINDOW` cases the runner ran, then the crashed case: if nothing crashes, the crash
   is not reproduced (no culprit named);
3. a bisection of that window: the culprit is the case C such that replaying from C crashes
   and replaying from the case after C does not.

A replay counts as crashing wherever it dies (heap damage is often noticed before the crashed
case is reached). Each search costs at most 2 + log2(WINDOW) replays; `--culprit-search N` caps
the searches per scheduling process (0: off).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conformance.harness.isolation import IsolatedRunner

WINDOW = 64  # cases replayed before the crashed one (heap damage is usually noticed soon)


@dataclass(frozen=True)
class Culprit:
    """What the search found: the culprit's case id (None: no culprit named) and how."""

    case: str | None
    summary: str


def case_label(item: pytest.Item) -> str:
    """The case id of a generated case item (`abs-float32-contiguous-native`), else its node id."""
    name = item.nodeid.rpartition("::")[2]
    return name[name.index("[") + 1 : -1] if name.endswith("]") and "[" in name else item.nodeid


class CulpritSearch:
    """The searches of one scheduling process (their number is capped)."""

    def __init__(self, runner: IsolatedRunner) -> None:
        self.runner = runner
        self.searches = 0
        self.replays = 0

    def search(self, item: pytest.Item, history: list[pytest.Item]) -> Culprit | None:
        """The culprit of `item`'s crash, given the cases its runner ran before it."""
        if not history:
            return None  # a fresh runner: the crash is the case's own
        budget = self.runner.run.suite.options.culprit_search
        if self.searches >= budget:
            return Culprit(None, f"no culprit search (--culprit-search {budget} used up)")
        self.searches += 1
        window = history[-WINDOW:]
        if self._crashes([item]):
            return Culprit(None, "it crashes alone in a fresh process too: its own crash")
        if not self._crashes([*window, item]):
            return Culprit(
                None,
                f"not reproduced: replaying the {len(window)} case(s) its runner ran before it "
                "did not crash",
            )
        lo, hi, replays = 0, len(window), 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            replays += 1
            if self._crashes([*window[mid:], item]):
                lo = mid
            else:
                hi = mid
        culprit = case_label(window[lo])
        return Culprit(
            culprit,
            f"the crash reproduces when {culprit} ran before it and not without it "
            f"({replays} replays in fresh runners of the last {len(window)} case(s))",
        )

    def _crashes(self, items: list[pytest.Item]) -> bool:
        """Whether a fresh runner dies while running `items` in order (a hang: no)."""
        self.replays += 1
        limit = self.runner.run.suite.options.case_timeout or None
        process = self.runner.start(replay=True)
        try:
            for i, item in enumerate(items):
                following = items[i + 1].nodeid if i + 1 < len(items) else None
                if not process.send(item.nodeid, following):
                    break
                message = process.receive(limit)
                while message is not None and message[0] != "finish":
                    message = process.receive(limit)
                if message is None:
                    break
        except TimeoutError:
            process.stop()
            process.close()
            return False
        status = process.close()
        return os.WIFSIGNALED(status) or (os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0)
