"""The plain pytest process asks each runner for the next case right after the one it waits for
(harness/lanes.py `RunnerLanes`, harness/isolation.py `IsolatedRunner.room`), so that no
runner waits for its owner between two cases, and with --runners 2 runs two runners at once:
an owner and runners faked at the message level, the order of what each did compared; a runner
that will not run the next case (--runner-cases, a device one process may open at a time) is
not asked ahead, one asked ahead that is closed before its turn is killed, and what a runner
that retired was asked ahead is asked again, before any later case, of its successor."""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile
from types import SimpleNamespace

import pytest

from conformance.harness.isolation import IsolatedRunner
from conformance.harness.lanes import AHEAD, RunnerLanes
from conformance.harness.nodes import CASE_PARAM
from conformance.record import CaseId


class FakeRunner:
    """A runner process answering each `run` with start, one report and finish (asking to be
    retired after the items named in `retiring`)."""

    def __init__(
        self, events: list[tuple[str, str]], retiring: str = "", most_ahead: int = AHEAD
    ) -> None:
        self.events, self.retiring = events, retiring
        self.most_ahead = most_ahead  # as many as its pipes hold (runners.py)
        self.queue: list[dict] = []
        self.killed: list[int] = []
        self.asked: list[str] = []

    def send(self, nodeid: str, next_nodeid: str | None) -> bool:
        self.events.append(("send", nodeid))
        self.asked.append(nodeid)
        report = {"failed": False}
        retire = nodeid in self.retiring
        self.queue += [
            {"kind": "start", "nodeid": nodeid},
            {"kind": "report", "nodeid": nodeid, "report": report},
            {"kind": "finish", "nodeid": nodeid, "retire": retire},
        ]
        return True

    def receive(self, timeout: float | None) -> dict | None:
        return self.queue.pop(0) if self.queue else None

    def kill(self, sig: int) -> None:
        self.killed.append(sig)

    def close(self) -> int:
        return 0


def _item(nodeid: str, events: list[tuple[str, str]]) -> SimpleNamespace:
    """A fake item; one named `<overload><n>` (upper case, then digits) is a generated case
    of that overload in float32 (`nodes.case_of`): cases with one overload share samples."""

    def logreport(report) -> None:
        events.append(("log", nodeid))

    hooks = SimpleNamespace(
        pytest_runtest_logstart=lambda **kw: None,
        pytest_runtest_logreport=logreport,
        pytest_runtest_logfinish=lambda **kw: None,
    )
    item = SimpleNamespace(nodeid=nodeid, location=(nodeid, 0, nodeid), ihook=hooks)
    overload = nodeid.rstrip("0123456789")
    if overload != nodeid and overload.isupper():
        case = CaseId(overload, "float32", "contiguous", "native")
        item.callspec = SimpleNamespace(params={CASE_PARAM: case})
    return item


def _session(items: list, maxfail: int = 0) -> SimpleNamespace:
    def from_serializable(config, data) -> SimpleNamespace:
        return SimpleNamespace(failed=data["failed"], longrepr=None, user_properties=[])

    hook = SimpleNamespace(pytest_report_from_serializable=from_serializable)
    config = SimpleNamespace(hook=hook, option=SimpleNamespace(maxfail=maxfail))
    return SimpleNamespace(items=items, config=config, shouldstop=False, shouldfail=False)


def _run_of(runner_cases: int = 0, exclusive: bool = False) -> SimpleNamespace:
    options = SimpleNamespace(
        culprit_search=0, case_timeout=0, runner_cases=runner_cases, runners=0
    )
    return SimpleNamespace(options=options, plan=SimpleNamespace(mode="fork", exclusive=exclusive))


def _owner(items: list, runner_cases: int = 0, exclusive: bool = False) -> IsolatedRunner:
    return IsolatedRunner(_session(items), _run_of(runner_cases, exclusive))  # type: ignore[arg-type]


def _run(
    names: str,
    runners: int = 1,
    retiring: str = "",
    maxfail: int = 0,
    most_ahead: int = AHEAD,
    **owner,
) -> tuple[list[tuple[str, str]], list[FakeRunner]]:
    """The items `names` run by a plain pytest process's `RunnerLanes` over fake runners."""
    events: list[tuple[str, str]] = []
    items = [_item(name, events) for name in names]
    session = _session(items, maxfail)
    lanes = RunnerLanes(session, _run_of(**owner), runners)  # type: ignore[arg-type]
    started: list[FakeRunner] = []

    def start(**kw) -> FakeRunner:
        started.append(FakeRunner(events, retiring, most_ahead))
        events.append(("runner", str(len(started))))
        return started[-1]

    lanes.starts.start = start  # type: ignore[method-assign]
    if owner.get("exclusive"):  # the device's turns, as _device_lock sets them there
        turns = SimpleNamespace(case_done=lambda: None, should_hand_over=lambda: False)
        lanes.starts.turns = turns  # type: ignore[assignment]
    lanes.run()
    return events, started


def test_the_next_case_is_asked_for_before_the_runner_finishes_this_one() -> None:
    events, _ = _run("abcd")
    assert events == [
        ("runner", "1"),
        ("send", "a"),
        ("send", "b"),  # asked for while a runs
        ("log", "a"),
        ("send", "c"),
        ("log", "b"),
        ("send", "d"),
        ("log", "c"),
        ("log", "d"),
    ]


def test_a_runner_that_will_not_run_the_next_case_is_not_asked_for_it() -> None:
    events, _ = _run("abcde", runner_cases=2)  # replaced after every 2 cases
    assert events == [
        ("runner", "1"),
        ("send", "a"),
        ("send", "b"),
        ("log", "a"),
        ("log", "b"),  # b is the runner's last: c is not asked of it
        ("runner", "2"),
        ("send", "c"),
        ("send", "d"),
        ("log", "c"),
        ("log", "d"),
        ("runner", "3"),
        ("send", "e"),
        ("log", "e"),
    ]
    events, _ = _run("abcd", exclusive=True)  # its turn on the device may end after any case
    assert [e for e in events if e[0] == "send"] == [("send", n) for n in "abcd"]
    pairs = zip("abc", "bcd", strict=True)
    assert all(events.index(("log", n)) < events.index(("send", m)) for n, m in pairs)


def test_a_runner_asked_ahead_is_killed_when_the_run_stops() -> None:
    events: list[tuple[str, str]] = []
    items = [_item(name, events) for name in "abc"]
    runner = _owner(items)
    process = runner.process = FakeRunner(events)  # type: ignore[assignment]
    runner.ask(items[0], items[1])  # type: ignore[arg-type]
    runner.ask(items[1], items[2])  # type: ignore[arg-type]
    runner.run_item(items[0], items[1])  # type: ignore[arg-type]
    assert list(runner.sent) == [(items[1], items[2])]
    runner.close()  # the run stopped (-x, an interrupt) before b's turn: b is never logged
    assert process.killed == [signal.SIGKILL] and not runner.sent
    assert runner.lost == [(items[1], items[2])]


def test_two_runners_run_at_once_and_every_case_is_logged_in_collection_order() -> None:
    events, started = _run("abcdef", runners=2)
    assert len(started) == 2
    # the first runner is filled first (a run of two cases stays in one runner), then the
    # second, then each in turn up to AHEAD cases ahead of the one it runs
    assert events[:9] == [
        ("runner", "1"),
        ("send", "a"),
        ("send", "b"),
        ("runner", "2"),
        ("send", "c"),
        ("send", "d"),
        ("send", "e"),
        ("send", "f"),
        ("log", "a"),
    ]
    assert started[0].asked == list("abe") and started[1].asked == list("cdf")
    assert [e[1] for e in events if e[0] == "log"] == list("abcdef")
    assert len(_run("ab", runners=2)[1]) == 1  # two cases: one runner


def test_the_cases_that_share_samples_stay_in_one_runner() -> None:
    """Cases of one overload and dtype are asked of the runner asked the case before them
    while it has room (it loaded their samples, placed them and ran CPU's references on
    them); other items still go to the runner with the fewest asked."""
    names = [f"{group}{n}" for group in "PQRS" for n in range(6)]
    events: list[tuple[str, str]] = []
    items = [_item(name, events) for name in names]
    lanes = RunnerLanes(_session(items), _run_of(), 2)  # type: ignore[arg-type]
    started: list[FakeRunner] = []

    def start(**kw) -> FakeRunner:
        started.append(FakeRunner(events))
        return started[-1]

    lanes.starts.start = start  # type: ignore[method-assign]
    lanes.run()
    runner_of = {n: i for i, r in enumerate(started) for n in r.asked}
    assert len(started) == 2 and sorted(runner_of) == sorted(names)
    # the first two cases of P fill the first runner, the next two the second: from then on
    # each group runs where the case before it did
    split = {g: {runner_of[n] for n in names if n[0] == g} for g in "PQRS"}
    assert all(len(split[g]) == 1 for g in "QRS"), split
    assert [e[1] for e in events if e[0] == "log"] == names


def test_a_runner_is_asked_at_most_ahead_cases_beyond_the_one_logged_next() -> None:
    """Past AHEAD cases a runner is asked no more until its owner logged some: what it ran
    ahead waits in its pipe."""
    names = "".join(chr(ord("A") + i) for i in range(3 * AHEAD))
    events, started = _run(names, runners=2)
    assert max(_most_outstanding(events, started).values()) == AHEAD + 1
    assert [e[1] for e in events if e[0] == "log"] == list(names)
    assert sorted(n for r in started for n in r.asked) == sorted(names)  # each asked once
    # -x: no runner runs far past the case that may stop the run
    events, started = _run(names, runners=2, maxfail=1)
    assert all(n <= 2 for n in _most_outstanding(events, started).values())


def test_a_runner_whose_pipes_hold_less_is_asked_less_far_ahead() -> None:
    """Where the system refused to enlarge a runner's pipes, it is asked no more cases ahead
    than their commands fit in a plain pipe: asking never waits on a runner that waits on
    its owner to read its reports."""
    names = "".join(chr(ord("A") + i) for i in range(40))
    events, started = _run(names, runners=2, most_ahead=4)
    assert max(_most_outstanding(events, started).values()) == 4 + 1
    assert [e[1] for e in events if e[0] == "log"] == list(names)


def test_a_pipe_that_cannot_be_enlarged_is_said_so() -> None:
    from conformance.harness.runners import _enlarge

    read, write = os.pipe()
    try:
        assert _enlarge(write, 1 << 17)
        assert fcntl.fcntl(write, fcntl.F_GETPIPE_SZ) >= 1 << 17
    finally:
        os.close(read)
        os.close(write)
    with tempfile.TemporaryFile() as plain:  # no pipe: F_SETPIPE_SZ fails
        assert not _enlarge(plain.fileno(), 1 << 17)


def _most_outstanding(events: list[tuple[str, str]], started: list[FakeRunner]) -> dict:
    """The most cases each runner had asked and not logged at once."""
    runner_of = {n: id(r) for r in started for n in r.asked}
    now = dict.fromkeys(runner_of.values(), 0)
    most = dict(now)
    for kind, name in events:
        if kind in ("send", "log"):
            now[runner_of[name]] += 1 if kind == "send" else -1
            most[runner_of[name]] = max(most[runner_of[name]], now[runner_of[name]])
    return most


def test_what_a_retired_runner_was_asked_ahead_is_asked_again_first() -> None:
    """Runner 1 retires after a (its runtime broke): b, asked ahead, is killed unrun and asked
    again of runner 3, before any later case; every case logged once, in order."""
    events, started = _run("abcdef", runners=2, retiring="a")
    assert started[0].killed == [signal.SIGKILL]
    after_a = events[events.index(("log", "a")) + 1 :]
    assert after_a[:2] == [("runner", "3"), ("send", "b")] and started[2].asked[0] == "b"
    assert [e[1] for e in events if e[0] == "log"] == list("abcdef")


class _Node:
    """A collector or item as pytest's SetupState sees it (its chain, setup and teardown)."""

    def __init__(self, name: str, parent: _Node | None, torn: list[str]) -> None:
        self.name, self.parent, self.torn = name, parent, torn

    def listchain(self) -> list[_Node]:
        return [*(self.parent.listchain() if self.parent else []), self]

    def setup(self) -> None:
        pass

    def teardown(self) -> None:
        self.torn.append(self.name)
        if self.name == "broken":
            raise RuntimeError("the module fixture's teardown failed")


def test_a_runner_whose_next_case_is_not_the_hinted_one_tears_down_what_it_does_not_share():
    """A runner asked for a (module m1) with the next collected case as its hint (a2, m1 too)
    runs b of m2 next, since a2 went to the other runner: before b, m1's fixtures are torn down
    (pytest asserts "previous item was not torn down properly" otherwise); a case that shares
    all that is set up tears down nothing."""
    from _pytest.runner import SetupState

    from conformance.harness.serving import TearDownFirst

    before_setup = TearDownFirst().pytest_runtest_setup

    torn: list[str] = []
    session = _Node("session", None, torn)
    m1, m2 = _Node("m1", session, torn), _Node("m2", session, torn)
    a, a2, a3, b = (_Node(n, m, torn) for n, m in (("a", m1), ("a2", m1), ("a3", m1), ("b", m2)))
    state = SetupState()
    for node in (a, a2, a3, b):
        node.session = SimpleNamespace(_setupstate=state)  # type: ignore[attr-defined]
    state.setup(a)  # type: ignore[arg-type]
    state.teardown_exact(a2)  # type: ignore[arg-type]  # a ran with a2 as its hint
    before_setup(a3)  # type: ignore[arg-type]
    assert torn == ["a"]  # a3 shares m1: nothing more torn down
    before_setup(b)  # type: ignore[arg-type]
    assert torn == ["a", "m1"]
    state.setup(b)  # type: ignore[arg-type]  # raises AssertionError unless m1 was torn down


def test_a_fixture_teardown_failing_before_a_case_is_that_case_s_setup_error_naming_it():
    """The teardown runs in the case's setup: its error is raised there (pytest reports it as
    the case's setup error, recorded), with a note saying whose fixture it was."""
    from _pytest.runner import SetupState

    from conformance.harness.serving import TearDownFirst

    torn: list[str] = []
    session = _Node("session", None, torn)
    broken, m2 = _Node("broken", session, torn), _Node("m2", session, torn)
    a, a2, b = _Node("a", broken, torn), _Node("a2", broken, torn), _Node("b", m2, torn)
    state = SetupState()
    b.session = SimpleNamespace(_setupstate=state)  # type: ignore[attr-defined]
    state.setup(a)  # type: ignore[arg-type]
    state.teardown_exact(a2)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="teardown failed") as info:
        TearDownFirst().pytest_runtest_setup(b)  # type: ignore[arg-type]
    assert "before this case's setup" in "".join(info.value.__notes__)
    assert torn == ["a", "broken"] and list(state.stack) == [session]  # the shared part stays
