"""The plain pytest process asks its runner for the next case right after the one it waits for
(harness/isolation.py `IsolatedRunner.run_item`), so that the runner never waits for its owner
between two cases: an owner and runner faked at the message level, the order of what each did
compared; a runner that will not run the next case (--runner-cases, a device one process may
open at a time) is not asked ahead, and one asked ahead that is closed before its turn is
killed."""

from __future__ import annotations

import signal
from types import SimpleNamespace

from conformance.harness.isolation import IsolatedRunner


class FakeRunner:
    """A runner process answering each `run` with start, one report and finish."""

    def __init__(self, events: list[tuple[str, str]]) -> None:
        self.events = events
        self.queue: list[dict] = []
        self.killed: list[int] = []

    def send(self, nodeid: str, next_nodeid: str | None) -> bool:
        self.events.append(("send", nodeid))
        report = {"failed": False}
        self.queue += [
            {"kind": "start", "nodeid": nodeid},
            {"kind": "report", "nodeid": nodeid, "report": report},
            {"kind": "finish", "nodeid": nodeid, "retire": False},
        ]
        return True

    def receive(self, timeout: float | None) -> dict | None:
        return self.queue.pop(0) if self.queue else None

    def kill(self, sig: int) -> None:
        self.killed.append(sig)

    def close(self) -> int:
        return 0


def _item(nodeid: str, events: list[tuple[str, str]]) -> SimpleNamespace:
    def logreport(report) -> None:
        events.append(("log", nodeid))

    hooks = SimpleNamespace(
        pytest_runtest_logstart=lambda **kw: None,
        pytest_runtest_logreport=logreport,
        pytest_runtest_logfinish=lambda **kw: None,
    )
    return SimpleNamespace(nodeid=nodeid, location=(nodeid, 0, nodeid), ihook=hooks)


def _owner(items: list, runner_cases: int = 0, exclusive: bool = False) -> IsolatedRunner:
    def from_serializable(config, data) -> SimpleNamespace:
        return SimpleNamespace(failed=data["failed"], longrepr=None, user_properties=[])

    hook = SimpleNamespace(pytest_report_from_serializable=from_serializable)
    session = SimpleNamespace(items=items, config=SimpleNamespace(hook=hook))
    options = SimpleNamespace(culprit_search=0, case_timeout=0, runner_cases=runner_cases)
    plan = SimpleNamespace(mode="fork", exclusive=exclusive)
    run = SimpleNamespace(options=options, plan=plan)
    return IsolatedRunner(session, run)  # type: ignore[arg-type]


def _run(names: str, **owner) -> tuple[list[tuple[str, str]], list[FakeRunner]]:
    events: list[tuple[str, str]] = []
    items = [_item(name, events) for name in names]
    runner = _owner(items, **owner)
    started: list[FakeRunner] = []

    def start(**kw) -> FakeRunner:
        started.append(FakeRunner(events))
        events.append(("runner", str(len(started))))
        return started[-1]

    runner.start = start  # type: ignore[method-assign]
    if owner.get("exclusive"):  # the device's turns, as _device_lock sets them there
        turns = SimpleNamespace(case_done=lambda: None, should_hand_over=lambda: False)
        runner.turns = turns  # type: ignore[assignment]
    for i, item in enumerate(items):
        nextitem = items[i + 1] if i + 1 < len(items) else None
        after = items[i + 2] if i + 2 < len(items) else None
        runner.run_item(item, nextitem, after)  # type: ignore[arg-type]
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
        ("log", "c"),  # c's next (d) is the last: asked for only once c is logged
        ("send", "d"),
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
    runner.run_item(items[0], items[1], items[2])  # type: ignore[arg-type]
    assert runner.ahead is items[1]
    runner.close()  # the run stopped (-x, an interrupt) before b's turn: b is never logged
    assert process.killed == [signal.SIGKILL] and runner.ahead is None
