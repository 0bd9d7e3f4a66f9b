"""Culprit search: which earlier case corrupted the memory a crash was detected in.

A kernel that writes past its output can pass all its own checks and leave glibc's heap
damaged; the abort comes at some later malloc or free, in whichever case runs next (the seed
report: a `masked_fill_` bug that crashed in `aten::all`). When a case crashes in a runner that
had run other cases first, the search replays in fresh runners (`runners.py`, `replay`):

1. the crashed case alone (done before the search, by isolation.py's confirmation: the case's
   record comes from that run if it finishes): if it crashes, the crash is its own;
2. the last `WINDOW` cases the runner ran, then the crashed case: if nothing crashes, the crash
   is not reproduced (no culprit named);
3. a bisection of that window: the suspect is the case C such that replaying from C crashes
   and replaying from the case after C does not;
4. confirmation: C alone, then a heap exercise (every small size class allocated and freed,
   then the heap consolidated: `serving.exercise_heap`) in a fresh runner; else C alone under
   glibc's malloc checking (libc_malloc_debug, MALLOC_CHECK_=3, in a spawned runner). If either
   dies, C corrupted memory: "memory corrupted by C". Otherwise the crash needs C to have run
   first but nothing shows C damaged memory (C may leave state, a workspace or a pool, that the
   crashed case trips on): "crashes only after C ran in this process", and the crash stays the
   crashed case's own.

A replay counts as crashing wherever it dies (heap damage is often noticed before the crashed
case is reached). Each search costs at most 3 + log2(WINDOW) replays; `--culprit-search N` caps
the searches per runner lane (an `IsolatedRunner`; a scheduling process keeps one or more,
harness/lanes.py; 0: off, and no crash-site replays).

A crash that is the case's own gets one more replay, under an op trace, for the op it died
inside (`crash_site`, crash_site.py): once per op and crash class, at most `SITES` times the
--culprit-search budget, never on a lazy device (its work runs at a sync, away from the op
that built it). The site is kept only if the replay died the same way (crash class) as the case.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from conformance.engine.diagnosis import crash_text
from conformance.findings import crash_class
from conformance.harness.crash_site import trace_site
from conformance.harness.runners import HEAP_EXERCISE, RunnerProcess

WINDOW = 64  # cases replayed before the crashed one (heap damage is usually noticed soon)
#: crash-site replays per search of the budget (--culprit-search 8: at most 32 ops and classes
#: traced per runner of a process; a backend whose every op crashes pays a bounded extra)
SITES = 4


@dataclass(frozen=True)
class Culprit:
    """What the search found: the culprit's case id (None: no culprit named: none, or one not
    confirmed to corrupt memory, then `after` names it) and how."""

    case: str | None
    summary: str
    after: str | None = None  # the crash needs this case to run first; no corruption shown
    unsearched: bool = False  # no search was made (--culprit-search used up)
    site: str | None = None  # with `after`: the op a traced replay of both died inside


def case_label(item: pytest.Item) -> str:
    """The case id of a generated case item (`abs-float32-contiguous-native`), else its node id."""
    name = item.nodeid.rpartition("::")[2]
    return name[name.index("[") + 1 : -1] if name.endswith("]") and "[" in name else item.nodeid


@dataclass(frozen=True)
class Replay:
    """How a replay ended: whether its runner died, its exit status and log (if it died)."""

    died: bool
    status: int = 0
    log: str = ""


class CulpritSearch:
    """The searches of one runner lane (an `IsolatedRunner`; their number is capped)."""

    def __init__(
        self,
        items: list[pytest.Item],
        start: Callable[..., RunnerProcess],
        budget: int,
        case_timeout: float,
        traced: bool = True,
    ) -> None:
        self.start = start  # a fresh runner: start(replay=True, env=...)
        self.budget = budget  # --culprit-search
        self.case_timeout = case_timeout
        self.traced = traced  # crash sites looked for (not on a lazy device)
        self.searches = 0
        self.replays = 0
        self._ids = {item.nodeid for item in items}
        self._traced: set[tuple[str, str]] = set()  # (op, crash class) replayed for a site

    def search(self, item: pytest.Item, history: list[pytest.Item], crash: str = "") -> Culprit:
        """The culprit of `item`'s crash (of class `crash`), given the cases its runner ran
        before it (not empty) and that `item` alone in a fresh runner does not crash."""
        budget = self.budget
        if self.searches >= budget:
            return Culprit(
                None,
                f"alone in a fresh process it does not crash; no culprit search "
                f"(--culprit-search {budget} used up)",
                unsearched=True,
            )
        self.searches += 1
        window = history[-WINDOW:]
        if not self._crashes([*window, item]):
            return Culprit(
                None,
                f"not reproduced: replaying the {len(window)} case(s) its runner ran before it "
                "did not crash",
            )
        lo, hi, replays = 0, len(window), 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            replays += 1
            if self._crashes([*window[mid:], item]):
                lo = mid
            else:
                hi = mid
        suspect = case_label(window[lo])
        how = (
            f"the crash reproduces when {suspect} ran before it and not without it "
            f"({replays} replays in fresh runners of the last {len(window)} case(s))"
        )
        evidence = self._corrupts(window[lo])
        if evidence is not None:
            return Culprit(suspect, f"{how}; {evidence}")
        return Culprit(
            None,
            f"{how}; not confirmed: {suspect} alone, then a heap exercise, does not crash, nor "
            "under glibc's malloc checking",
            after=suspect,
            site=self.crash_site(item, crash, before=window[lo]),
        )

    def crash_site(
        self, item: pytest.Item, crash: str, before: pytest.Item | None = None
    ) -> str | None:
        """The op `item` (whose crash of class `crash` is its own; `before`: the case it needs
        to run first) dies inside, from one replay in a fresh runner under an op trace
        (crash_site.py); None when searches are off or sites are not traced, when a case of
        the same op already crashed that way in this lane, past `SITES` x the budget of them,
        when the replay does not die the same way or ends outside an op, or when it fails (a
        diagnostic: the crash's record stands without it)."""
        key = (_op_of(item), crash)
        if (
            not self.budget
            or not self.traced
            or key in self._traced
            or len(self._traced) >= SITES * self.budget
        ):
            return None
        self._traced.add(key)
        try:
            fd, path = tempfile.mkstemp(prefix="conformance-op-trace-")
            os.close(fd)
            try:
                replay = self._replay([*([before] if before else []), item], trace=path)
                with open(path, errors="replace") as f:
                    trace = f.read()
            finally:
                os.unlink(path)
        except Exception:  # noqa: BLE001 - diagnostics never cost the crash its record
            return None
        if not replay.died or crash_of(replay.status, replay.log) != crash:
            return None
        return trace_site(trace, key[0])

    def _corrupts(self, suspect: pytest.Item) -> str | None:
        """How `suspect` is shown to corrupt memory, or None."""
        if self._crashes([suspect], exercise=True):
            return "confirmed: it alone, then a heap exercise, crashes"
        preload = _malloc_debug()
        if preload and self._crashes([suspect], exercise=True, env=preload):
            return "confirmed: it alone crashes under glibc's malloc checking"
        return None

    def _crashes(
        self, items: list[pytest.Item], exercise: bool = False, env: dict[str, str] | None = None
    ) -> bool:
        """Whether a fresh runner dies while running `items` in order (then the heap exercise,
        if asked; `env`: in a spawned runner with these variables). A hang: no."""
        return self._replay(items, exercise, env).died

    def _replay(
        self,
        items: list[pytest.Item],
        exercise: bool = False,
        env: dict[str, str] | None = None,
        trace: str | None = None,
    ) -> Replay:
        """`items` run in order in a fresh runner (see `_crashes`; `trace`: under an op trace
        written there): how it ended."""
        self.replays += 1
        limit = self.case_timeout or None
        process = self.start(replay=True, env=env)
        ids = [item.nodeid for item in items] + ([HEAP_EXERCISE] if exercise else [])
        log = ""
        try:
            if trace is not None:
                process.trace_ops(trace)
            if not self._runs_through(process, ids, limit):
                process.wait()  # it ended before its last case finished: all of its log
                log = process.log()  # read before close removes it
        except TimeoutError:
            process.stop()
            return Replay(False)
        finally:
            status = process.close()
        return Replay(_died(status), status, log)

    def _runs_through(self, process: RunnerProcess, ids: list[str], limit: float | None) -> bool:
        """Whether `process` finished every one of `ids` in order (False: it ended first)."""
        for i, nodeid in enumerate(ids):
            following = ids[i + 1] if i + 1 < len(ids) and ids[i + 1] in self._ids else None
            if not process.send(nodeid, following):
                return False
            message = process.receive(limit)
            while message is not None and message["kind"] != "finish":
                message = process.receive(limit)
            if message is None:
                return False
        return True


def crash_of(status: int, log: str) -> str:
    """The crash class (findings.crash_class) of a runner that ended with `status` and `log`."""
    return crash_class(crash_text(status, log))


def _died(status: int) -> bool:
    return os.WIFSIGNALED(status) or (os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0)


def _op_of(item: pytest.Item) -> str:
    """The op (or module, scenario) part of an item's case id: `neg` of
    `neg-float32-contiguous-native`, `nn.L1Loss` of `nn.L1Loss-float32-eval-contiguous-0`."""
    return case_label(item).split("-")[0]


def _malloc_debug() -> dict[str, str] | None:
    """The environment of glibc's malloc checking (None where this glibc has no
    libc_malloc_debug), added to whatever is already preloaded."""
    from conformance.engine.checkers import LaunchError, malloc_debug_library

    try:
        library = malloc_debug_library()
    except LaunchError:
        return None
    preload = " ".join(p for p in (os.environ.get("LD_PRELOAD", ""), library) if p)
    return {"LD_PRELOAD": preload, "MALLOC_CHECK_": "3"}
