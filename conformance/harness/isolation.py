"""Crash and hang isolation: cases run in runner processes (runners.py); a crash or a hang
costs one case, and gets the same record with or without pytest-xdist.

The process that schedules cases (the plain pytest process, or each xdist worker: xdist stays the
scheduler) owns runners (`IsolatedRunner`: one at a time each; the plain pytest process keeps
several busy, harness/lanes.py): a forked child (fast: it inherits the collected session) or, for
devices that refuse use in a forked child once initialised (as CUDA does), a fresh interpreter
that collects the same items (`spawn`; see `plan_isolation`). It asks a runner for items and logs
the reports it streams back (terminal, results, JUnit) as if it had run them, in the order it
asked (the plain pytest process asks ahead, so its runners never wait for it). A runner
serves case after case, failed ones included, and is replaced after a crash, a hang or
`--runner-cases` cases (a spawned runner costs an interpreter start and a collection). If the
runner dies (SIGSEGV, abort, sanitizer exit) the case is `crashed`, with the signal, the glibc or
sanitizer message and faulthandler's stack from the runner's log; when the runner had run other
cases first, culprit.py looks for the case that corrupted memory. A case past `--case-timeout` is
`hung` (the runner is stopped with SIGABRT first, so faulthandler prints where it hung). A case
whose verdict was known when the suite's own diagnostics crashed keeps that verdict. A later case
that crashes after a failed one gets the culprit search, which names the case that corrupted
memory. The scheduling process never touches the device: usability is probed in a child.
"""

from __future__ import annotations

import signal
from collections import deque
from typing import Any

import pytest

from conformance.engine.diagnosis import describe_status, diagnose
from conformance.harness.culprit import Culprit, CulpritSearch, case_label, crash_of
from conformance.harness.device_turns import DeviceTurns
from conformance.harness.families import registry
from conformance.harness.runner_starts import Owner, RunnerStarts
from conformance.harness.runners import RUNNER_ENV, Attempt, RunnerProcess
from conformance.processes import messages
from conformance.record import CaseRecord, Status

__all__ = ("RUNNER_ENV", "IsolatedRunner", "Owner", "RunnerStarts", "describe_status", "diagnose")


# ---- the parent ----------------------------------------------------------------------------------
class IsolatedRunner:
    """Runs items of the process that schedules them (the plain pytest process, or an xdist
    worker) in one runner process at a time (runners.py), replaced after a crash, a hang or
    --runner-cases cases: a crash or hang costs that item alone, gets the same record wherever
    it happened, and is followed by the culprit search (culprit.py) when the runner had run
    other cases before it. Items may be asked of the runner ahead (`ask`, while it runs
    others); their reports are gathered in the order they were asked (`run_item`)."""

    def __init__(
        self, session: pytest.Session, run: Owner, starts: RunnerStarts | None = None
    ) -> None:
        self.session = session
        self.run = run
        self.starts = starts if starts is not None else RunnerStarts(session, run)
        self.process: RunnerProcess | None = None
        self.history: list[pytest.Item] = []  # items the current runner finished, in order
        self.cases = 0  # cases the current runner ran
        # asked of the current runner and not gathered, each with its next-item hint
        self.sent: deque[tuple[pytest.Item, pytest.Item | None]] = deque()
        self.lost: list[tuple[pytest.Item, pytest.Item | None]] = []  # closed before their turn
        options = run.options
        backend = getattr(run, "backend", None)
        self.culprits = CulpritSearch(
            session.items,
            self.start,
            options.culprit_search,
            options.case_timeout,
            traced=getattr(backend, "lazy", None) is None,
        )

    def start(self, *, replay: bool = False, env: dict[str, str] | None = None) -> RunnerProcess:
        return self.starts.start(replay=replay, env=env)

    @property
    def turns(self) -> DeviceTurns | None:
        return self.starts.turns

    def finish(self) -> None:
        """The end of the run: its runner and zygote closed, the case list file removed."""
        try:
            self.close()
        finally:
            self.starts.finish()

    def close(self) -> None:
        """The current runner closed; what it was asked ahead is killed unrun (`lost`)."""
        if self.process is not None:
            if self.sent:  # running a case this runner will not log
                self.process.kill(signal.SIGKILL)
            self.process.close()
            self.process = None
            self.history = []
            self.cases = 0
        self.lost += self.sent
        self.sent.clear()

    def room(self, ahead: int = 1) -> bool:
        """Whether an item may be asked of this runner now: one at a time, and up to `ahead`
        more while it runs where the runner will run them: not on a device one process may
        open at a time (the turn may end after any case) nor past --runner-cases. A runner
        that retires itself (its runtime broke) runs nothing it was asked ahead (serving.py),
        and one closed before their turn (a crash, a hang, -x) is killed (`close`): they run
        in the next one (`lost`)."""
        if not self.sent:
            return True
        limit = self.run.options.runner_cases
        if self.process is not None:  # no more than its pipes hold (runners.py)
            ahead = min(ahead, self.process.most_ahead)
        return (
            not self.run.plan.exclusive
            and len(self.sent) <= ahead
            and (not limit or self.cases + len(self.sent) < limit)
        )

    def ask(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Send `item` to the runner (started if needed), to be gathered in its turn. If the
        runner died meanwhile, the send fails and gathering it sees the end: this one."""
        if self.process is None:
            self.process, self.history = self.start(), []
        _send(self.process, item, nextitem)
        self.sent.append((item, nextitem))

    def ask_lost(self) -> None:
        """Ask the items a closed runner was asked ahead (`lost`) again, in order."""
        lost, self.lost = self.lost, []
        for item, nextitem in lost:
            self.ask(item, nextitem)

    def run_item(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Run one item in the runner (asked now unless it was asked ahead: then it is the
        first the runner was asked) and log its reports here."""
        if not self.sent:
            self.ask(item, nextitem)
        asked, _ = self.sent.popleft()
        assert asked is item, f"{item.nodeid} gathered out of turn ({asked.nodeid} was asked)"
        process = self.process
        assert process is not None
        attempt = self._attempt(process, item)
        if attempt.end == "finished":
            attempt.log(item)
            self.history.append(item)
            self.cases += 1
            limit = self.run.options.runner_cases
            if (limit and self.cases >= limit) or attempt.retire:
                self.close()  # a fresh runner for the next case (retire: runtime broken)
            elif self.turns is not None:
                self.turns.case_done()
                if self.turns.should_hand_over():
                    self.close()  # the device is one process's at a time: another owner's turn
        elif attempt.end == "hung":
            self._hung(item, process, attempt.started)
        elif attempt.end == "missing":
            _report_problem(self.run, item, Status.ERROR, "harness", attempt.reason, started=False)
        else:
            self._ended(item, nextitem, process, attempt)

    def _attempt(self, process: RunnerProcess, item: pytest.Item) -> Attempt:
        """Gather what comes back from `process` for `item` (asked of it already) until it
        finishes or ends."""
        attempt = Attempt(item=item, config=self.session.config)
        wait = self.run.options.case_timeout or None
        while not attempt.end:
            try:
                message = process.receive(wait)
            except TimeoutError:
                attempt.end = "hung"
                return attempt
            if message is None:
                attempt.end = "died"
                return attempt
            messages.dispatch(attempt, message)
        return attempt

    def _hung(self, item: pytest.Item, process: RunnerProcess, started: bool) -> None:
        limit = self.run.options.case_timeout
        process.stop()
        _, detail = diagnose(process.log())
        self.close()
        if not started:
            self._never_started(item, f"started no case within {limit:g} s", detail)
            return
        message = (
            f"[hang] the case ran past its time limit of {limit:g} s (--case-timeout); its "
            "process was stopped"
        )
        _report_problem(self.run, item, Status.HUNG, "hang", message, detail, started=True)

    def _ended(
        self,
        item: pytest.Item,
        nextitem: pytest.Item | None,
        process: RunnerProcess,
        attempt: Attempt,
    ) -> None:
        started, checked = attempt.started, bool(attempt.reports)
        status = process.wait()
        log = process.log()
        history = self.history
        self.close()
        if not started:
            self._never_started(item, describe_status(status), diagnose(log)[1] or log)
            return
        verdict = self.run.run_dir.read_verdict(process.pid, item.nodeid)
        if verdict is not None:  # its verdict stands: the diagnostics or the check after it died
            _report_diagnostics_crash(item, *verdict, status, log, checked)
            return
        if not history:  # it crashed in a fresh runner: its own crash
            site = self._site(item, status, log)
            _report_crash(self.run, item, status, log, None, checked, site)
            return
        alone = self._confirm(item, nextitem)
        if alone.end != "finished":
            hung = alone.end == "hung"
            own = (
                "alone in a fresh process it hangs past the time limit: its own failure"
                if hung
                else "it crashes alone in a fresh process too: its own crash"
            )
            site = None if hung else self._site(item, status, log)
            _report_crash(self.run, item, status, log, Culprit(None, own), checked, site)
            return
        culprit = self.culprits.search(item, history, crash_of(status, log))
        if culprit.case is not None or culprit.after is not None or culprit.unsearched:
            _report_crash(self.run, item, status, log, culprit, checked, culprit.site)
            return
        how = describe_status(status)
        headline = diagnose(log)[0]
        alone.note(
            f"its process {how}{': ' + headline if headline else ''} after "
            f"{len(history)} other case(s) ran in it; alone in a fresh process it ran to this "
            f"verdict, and {culprit.summary}: not charged to this case"
        )
        alone.log(item)

    def _site(self, item: pytest.Item, status: int, log: str) -> str | None:
        """The op `item`'s own crash died inside (culprit.py's traced replay), or None."""
        return self.culprits.crash_site(item, crash_of(status, log))

    def _confirm(self, item: pytest.Item, nextitem: pytest.Item | None) -> Attempt:
        """The case run again alone in a fresh runner, before a crash is recorded as its own:
        its attempt (`end` "finished", or "died"/"hung" there too)."""
        process = self.start()
        attempt = Attempt(end="died")
        try:
            _send(process, item, nextitem)
            attempt = self._attempt(process, item)
        finally:
            if attempt.end == "hung":
                process.stop()
            process.close()
        return attempt

    def _never_started(self, item: pytest.Item, how: str, detail: str) -> None:
        """The runner never got to the case: a harness failure, not a verdict on any case."""
        first = next((ln for ln in detail.splitlines() if ln.strip()), "")
        headline = diagnose(detail)[0]
        message = (
            f"[harness] the {self.run.plan.mode} case runner {how} before running a case: "
            f"{headline or first}"
        )
        _report_problem(self.run, item, Status.ERROR, "harness", message, detail, started=False)
        self.session.shouldstop = message


def _send(process: RunnerProcess, item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Ask `process` to run `item`, telling it the item collected after it (pytest's teardown
    hint)."""
    process.send(item.nodeid, nextitem.nodeid if nextitem is not None else None)


#: where a runner dies after a case's reports came (harness/serving.py sends them before it asks
#: the device whether it still works: the sync then runs what the case left pending)
AFTER_CHECKS = (
    "after this case's checks, while its runner checked that the device still works (a sync "
    "and a small computation; on a lazy device the sync runs the work the case left pending)"
)


def _report_crash(
    run: Owner,
    item: pytest.Item,
    status: int,
    log: str,
    culprit: Culprit | None,
    checked: bool = False,
    site: str | None = None,
) -> None:
    """The crash record of `item` (`checked`: its reports had come, so the process died in the
    runner's device check after it: still the case's, since the work is its own; `site`: the
    op a traced replay of it died inside)."""
    how = describe_status(status)
    headline, detail = diagnose(log)
    what = f"the process {how} {AFTER_CHECKS if checked else 'while running this case'}"
    if site:
        what += f", inside {site} (where a replay under an op trace died)"
    if headline:
        what += f": {headline}"
    extra: dict[str, Any] = {"crash_class": crash_of(status, log)}
    if site:
        extra["crash_site"] = site
    if culprit is not None and culprit.case is not None:
        message = (
            f"[crash] memory corrupted by {culprit.case} (its own checks passed), detected in "
            f"{case_label(item)}: {what}"
        )
        extra["culprit"] = culprit.case
    elif culprit is not None and culprit.after is not None:
        message = (
            f"[crash] crashes only after {culprit.after} ran in this process (not shown to "
            f"corrupt memory: it may leave state that {case_label(item)} trips on): {what}"
        )
        extra["crashes_after"] = culprit.after
    else:
        message = f"[crash] {what}"
    if culprit is not None:
        extra["culprit_search"] = culprit.summary
    _report_problem(run, item, Status.CRASHED, "crash", message, detail, started=True, extra=extra)


def _report_diagnostics_crash(
    item: pytest.Item, verdict: CaseRecord, longrepr: str, status: int, log: str, checked: bool
) -> None:
    """The case's own verdict stands; the crash of the suite's diagnostics (or, `checked`: of
    the runner's device check after the case's reports came) is noted on it."""
    headline, _ = diagnose(log)
    how = describe_status(status)
    note = (
        f"its runner was {how} {AFTER_CHECKS}"
        if checked
        else f"the suite's diagnostics (blame, repro) crashed: {how}"
    )
    if headline:
        note += f": {headline}"
    verdict.extra["diagnostics"] = note
    outcome = "failed" if verdict.status is Status.FAILED else "skipped"
    report = pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={},
        outcome=outcome,  # type: ignore[arg-type]
        longrepr=f"{longrepr}\n  ({note})" if outcome == "failed" else ("", 0, longrepr),
        when="call",
        user_properties=[("conformance", verdict.to_json())],
    )
    if verdict.status is Status.XFAILED:
        report.wasxfail = longrepr.splitlines()[0] if longrepr else "expected failure"
    item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


class WorkerIsolation:
    """Under pytest-xdist: the worker hands each conformance item to its runner process, so a
    crash costs that case, never the worker (registered by the session when the worker's plan
    is fork or spawn). xdist keeps scheduling; this only changes where an item runs."""

    def __init__(self, run: Owner) -> None:
        self.run = run
        self.runner: IsolatedRunner | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        if registry().of_item(item) is None:
            return None
        if self.runner is None:
            self.runner = IsolatedRunner(item.session, self.run)
        self.runner.run_item(item, nextitem)
        return True

    def pytest_sessionfinish(self) -> None:
        if self.runner is not None:
            self.runner.finish()


def _report_problem(
    run: Owner,
    item: pytest.Item,
    status: Status,
    check: str,
    message: str,
    detail: str = "",
    *,
    started: bool,
    extra: dict[str, Any] | None = None,
) -> None:
    """Log a failed report for `item` that its runner could not send (crash, hang, harness)."""
    if not started:
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    longrepr = message + ("\n--- output ---\n" + detail if detail else "")
    record = run.record_for(item, status, check=check, message=longrepr)
    if record is not None and extra:
        record.extra.update(extra)
    properties = [] if record is None else [("conformance", record.to_json())]
    report = pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={},
        outcome="failed",
        longrepr=longrepr,
        when="call",
        user_properties=properties,
    )
    item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
