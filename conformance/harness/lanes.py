"""The plain pytest process's runners side by side (`--runners`): its cases run in up to N
runner processes at the same time, each an `IsolatedRunner` (isolation.py) with its own
history, culprit search and replacement, all forked by one zygote; pytest-xdist's workers keep
one each (xdist is their scheduler).

Items are asked in collection order, each of the first runner with one ahead to spare (one
running, one asked ahead: `IsolatedRunner.room`), so a run of two cases stays in one runner,
then of the runner asked the item before it where both are cases of one overload and dtype
(they share samples, placements and CPU's references, which each runner loads and computes for
itself) unless it is `GROUP_SLACK` ahead of the others, else of the runner with the fewest
asked, up to `AHEAD` (1 under -x/--maxfail, so no runner runs far past the case that stops the
run; after a switch to spawned runners under --runners auto, the first runner alone); every
item's reports are gathered and logged in collection order, so the terminal, the records and
-x read as in a run with one runner (a hang is timed from when its turn to be logged came: never
shorter than the limit).
A runner closed with items asked ahead (a crash, a hang, a runtime that retired it) is asked
them again at once, in order, before any later item: each runner's items stay in collection
order, which is the order its reports come back in. Each item carries the next collected item
as its `nextitem` hint (pytest's fixture teardown); where a runner's next item is another, the
runner tears down what that item does not share (serving.py)."""

from __future__ import annotations

import pytest

from conformance.harness.isolation import IsolatedRunner
from conformance.harness.nodes import case_of
from conformance.harness.runner_starts import Owner, RunnerStarts
from conformance.harness.runners import CASE_REPORT_BYTES, PIPE_BYTES

#: cases asked of one runner ahead of the one it runs, where more than one runs at a time: a
#: long case in one leaves the others that many to run meanwhile (their reports wait in their
#: pipes, enlarged for them: runners.py `PIPE_BYTES`; a full pipe makes the runner wait, never
#: its owner). A default run on 2 cores: 152 s wall with 1, 140 s with 16, 127 s with 64; with
#: 64 a runner still waited 12-13 s in all while the other ran a long case (a 2 s
#: convolution_backward_overrideable is 400 short cases), with 512 about 2 s (issue 85). As many
#: as the enlarged pipes hold: one bound, not two numbers to keep in step
AHEAD = PIPE_BYTES // CASE_REPORT_BYTES
#: cases a runner may be asked beyond the runner with the fewest asked, to keep the cases that
#: share samples together (a run of one overload and dtype still ends on every runner at once)
GROUP_SLACK = 16


class RunnerLanes:
    """The runners of a plain pytest process, sharing one zygote (`RunnerStarts`)."""

    def __init__(self, session: pytest.Session, run: Owner, count: int) -> None:
        self.session = session
        self.owner = run
        self.starts = RunnerStarts(session, run)
        self.lanes = [IsolatedRunner(session, run, self.starts) for _ in range(max(1, count))]
        # -x/--maxfail: no runner runs far past the case that stops the run (their repros)
        self.ahead = AHEAD if len(self.lanes) > 1 and not session.config.option.maxfail else 1
        if self.ahead > 1:
            self.starts.pipe_bytes = PIPE_BYTES
        # the samples the last item asked uses, and the runner it was asked of
        self._last: tuple[tuple[str, str] | None, IsolatedRunner | None] = (None, None)

    def run(self) -> None:
        """Run every collected item; returns when all ran or the run stops."""
        session, items = self.session, self.session.items
        lane_of: dict[int, IsolatedRunner] = {}  # item index -> the runner it was asked of
        asked = 0  # items asked so far (0 .. asked-1)

        def next_of(i: int) -> pytest.Item | None:
            return items[i + 1] if i + 1 < len(items) else None

        try:
            for i, item in enumerate(items):
                if session.shouldstop or session.shouldfail:
                    break
                while asked < len(items):
                    samples = _samples_of(items[asked])
                    lane = self._next_lane(samples)
                    if lane is None:
                        break
                    lane.ask(items[asked], next_of(asked))
                    lane_of[asked] = lane
                    self._last = (samples, lane)
                    asked += 1
                lane = lane_of[i]
                lane.run_item(item, next_of(i))
                if session.shouldstop or session.shouldfail:
                    lane.lost.clear()
                else:
                    lane.ask_lost()  # before any later item: its runner's order holds
        finally:
            self.finish()

    def _next_lane(self, samples: tuple[str, str] | None) -> IsolatedRunner | None:
        """The runner the next item (using `samples`) is asked of: the first with one case ahead to
        spare (so a run of two cases stays in one runner), else the one asked the item before it
        where both use the same samples (`_samples_of`: one runner loads them, places them and runs
        CPU's references on them for all those cases) while it is at most `GROUP_SLACK` asked ahead
        of the runner with the fewest asked, else that one; up to `AHEAD` ahead of the case it runs
        (a long case in one runner leaves the others that many to run meanwhile: they are logged
        once its turn is over)."""
        lanes = self.lanes
        run = self.owner
        if run.plan.mode == "spawn" and not run.options.runners:  # it switched to spawn
            lanes = lanes[:1]  # --runners auto: a spawned runner costs an interpreter start
        first = next((lane for lane in lanes if lane.room(1)), None)
        if first is not None or self.ahead == 1:  # one runner: one ahead keeps it busy
            return first
        spare = [lane for lane in lanes if lane.room(self.ahead)]
        if not spare:
            return None
        fewest = min(spare, key=lambda lane: len(lane.sent))
        kept, last = self._last
        if samples is not None and samples == kept:
            kin = next((lane for lane in spare if lane is last), None)
            if kin is not None and len(kin.sent) <= len(fewest.sent) + GROUP_SLACK:
                return kin
        return fewest

    def finish(self) -> None:
        try:
            for lane in self.lanes:
                lane.close()  # one asked ahead is killed: the run stopped before its turn
        finally:
            self.starts.finish()


def _samples_of(item: pytest.Item) -> tuple[str, str] | None:
    """The (overload, dtype) whose samples a generated case runs (its value set's and the
    ordinary ones the modes share); None for a family's own test."""
    case = case_of(item)
    return (case.overload, case.dtype) if case is not None else None
