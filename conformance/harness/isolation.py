"""Crash and hang isolation: cases run in runner processes (runners.py); a crash or a hang
costs one case, and gets the same record with or without pytest-xdist.

The process that schedules cases (the plain pytest process, or each xdist worker: xdist stays
the scheduler) owns a runner: a forked child (fast: it inherits the collected session) or, for
devices that refuse use in a forked child once initialised (as CUDA does), a fresh interpreter
that collects the same items (`spawn`; see `plan_isolation`). It sends the runner one item at a
time and logs the reports it streams back (terminal, results, JUnit) as if it had run them. A
runner serves case after case, failed ones included, and is replaced after a crash, a hang or
`--runner-cases` cases (a spawned runner costs an interpreter start and a collection). If
the runner dies (SIGSEGV, abort, sanitizer exit) the case is `crashed`, with the signal, the
glibc or sanitizer message and faulthandler's stack from the runner's log; when the runner had
run other cases first, culprit.py looks for the case that corrupted memory. A case past
`--case-timeout` is `hung` (the runner is stopped with SIGABRT first, so faulthandler prints
where it hung). A case whose verdict was known when the suite's own diagnostics crashed keeps
that verdict. A later case that crashes after a failed one gets the culprit search, which names
the case that corrupted memory. The scheduling process never touches the device: usability is
probed in a child.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from conformance.engine.diagnosis import describe_status, diagnose
from conformance.findings import crash_class
from conformance.harness.culprit import Culprit, case_label
from conformance.harness.roles import Role
from conformance.harness.runners import RETIRE, RUNNER_ENV, RunnerProcess
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.engine.probe import Probe
    from conformance.harness.session import ConformanceRun
    from conformance.harness.suite import Suite

__all__ = (
    "RUNNER_ENV",
    "IsolatedRunner",
    "Plan",
    "describe_status",
    "diagnose",
    "plan_isolation",
    "run_isolated",
)


@dataclass
class Plan:
    """How the cases of this process run, and what the device probe found."""

    mode: str  # "fork", "spawn", "in-process" (xdist worker, --isolate none), "xdist"
    probe: Probe
    reason: str = ""  # why this mode
    # under xdist (the controller's plan): how each worker runs its cases
    runner: str = ""
    runner_cases: int = 0  # cases one runner runs before a fresh one replaces it (0: no limit)

    def describe(self, timeout: float) -> str:
        limit = f"{timeout:g} s per case" if timeout else "none"
        if self.mode == "xdist":
            how = _how(self.runner, self.runner_cases)
            text = f"isolation: in pytest-xdist workers, each {how}"
        else:
            text = f"isolation: {_how(self.mode, self.runner_cases)}"
        text += f"; time limit: {limit}"
        return text + (f" [{self.reason}]" if self.reason else "")


def _how(mode: str, runner_cases: int) -> str:
    """How cases run in one scheduling process, for the run header."""
    if mode == "in-process":
        return "running its cases in-process (a crash or hang ends the run or the worker)"
    process = "a forked child" if mode == "fork" else "a fresh interpreter (spawned)"
    reuse = f"{runner_cases} cases" if runner_cases else "any number of cases"
    return (
        f"running its cases in a runner process, {process}, reused across cases and replaced "
        f"after a crash, a hang or {reuse} (a crash or hang costs one case)"
    )


def plan_isolation(suite: Suite, role: Role) -> Plan:
    """Choose how cases run and probe the device, never initialising it in a process that
    forks case runners later (a plain pytest process, an xdist worker). Raises UsageError (one
    line) for an unusable device. The xdist controller makes the same choice its workers make,
    for the run header."""
    return _plan_isolation(suite, role)


def _plan_isolation(suite: Suite, role: Role) -> Plan:
    from conformance.engine.probe import probe_here, probe_in_fork, probe_in_fresh_process

    backend = suite.backend
    isolate = suite.options.isolate
    cases = suite.options.runner_cases
    if role is Role.SPAWNED_RUNNER:
        return _usable(Plan("in-process", probe_here(backend)), backend)
    controller = role is Role.XDIST_CONTROLLER

    def plan(mode: str, probe: Probe, reason: str) -> Plan:
        if controller:
            return Plan("xdist", probe, reason, runner=mode, runner_cases=cases)
        return Plan(mode, probe, reason, runner_cases=cases)

    if isolate == "none":
        probe = probe_in_fresh_process(backend) if controller else probe_here(backend)
        return _usable(plan("in-process", probe, "--isolate none"), backend)
    if isolate == "spawn":
        return _usable(plan("spawn", probe_in_fresh_process(backend), "--isolate spawn"), backend)
    if _initialised(backend):
        reason = (
            f"torch.{backend.device_type}.is_initialized() is True before any case ran: a "
            "forked child could not use the device"
        )
        if isolate == "fork":
            raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
        return _usable(plan("spawn", probe_in_fresh_process(backend), reason), backend)
    probe = probe_in_fork(backend)
    if probe.usable:
        reason = "--isolate fork" if isolate == "fork" else "a forked child can use the device"
        return plan("fork", probe, reason)
    fresh = probe_in_fresh_process(backend)
    if not fresh.usable:
        return _usable(plan("fork", fresh, ""), backend)
    reason = f"the device refused use in a forked child ({probe.error})"
    if isolate == "fork":
        raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
    return plan("spawn", fresh, reason)


def _initialised(backend) -> bool:
    fn = backend.device_function("is_initialized")
    try:
        return bool(fn()) if callable(fn) else False
    except Exception:  # noqa: BLE001 - a failing query is no evidence of initialisation
        return False


def _usable(plan: Plan, backend) -> Plan:
    if not plan.probe.usable:
        raise pytest.UsageError(
            f"backend '{backend.module_name}' registered device '{backend.device_type}' but it "
            f"is not usable ({plan.probe.error}, probed in a {plan.probe.where}); check the "
            "backend, or pass --device"
        )
    return plan


# ---- the parent ---------------------------------------------------------------------------------
class IsolatedRunner:
    """Runs the items of the process that schedules them (the plain pytest process, or an xdist
    worker) in runner processes (runners.py), one item per request: a crash or hang costs that
    item alone, gets the same record wherever it happened, and is followed by the culprit search
    (culprit.py) when the runner had run other cases before it."""

    def __init__(self, session: pytest.Session, run: ConformanceRun) -> None:
        from conformance.harness.culprit import CulpritSearch

        self.session = session
        self.run = run
        self.process: RunnerProcess | None = None
        self.history: list[pytest.Item] = []  # items the current runner finished, in order
        self.cases = 0  # cases the current runner ran
        self.culprits = CulpritSearch(self)

    def start(self, *, replay: bool = False, env: dict[str, str] | None = None) -> RunnerProcess:
        """A runner in the plan's mode; `env` (extra variables) makes it a spawned one."""
        run = self.run
        if run.plan.mode == "fork" and _initialised(run.suite.backend):
            run.switch_to_spawn(
                f"torch.{run.suite.backend.device_type}.is_initialized() became True in the "
                "pytest process: forked children could not use the device"
            )

        def forked() -> None:
            run.forked_child = True

        return RunnerProcess(
            self.session.config,
            self.session.items,
            "spawn" if env else run.plan.mode,
            replay=replay,
            on_fork=forked,
            env=env,
            backend=run.suite.backend,
        )

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None
            self.history = []
            self.cases = 0

    def run_item(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Run one item in the runner (started if needed) and log its reports here."""
        if self.process is None:
            self.process, self.history = self.start(), []
        process, limit = self.process, self.run.suite.options.case_timeout
        # if it died between two items, the send fails and receive() sees the end: this one
        process.send(item.nodeid, nextitem.nodeid if nextitem is not None else None)
        started = False
        wait = limit or None
        while True:
            try:
                message = process.receive(wait)
            except TimeoutError:
                self._hung(item, process, started)
                return
            if message is None:
                self._ended(item, process, started)
                return
            kind, _, data = message
            if kind == "start":
                started = True
                item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            elif kind == "report":
                report = self.session.config.hook.pytest_report_from_serializable(
                    config=self.session.config, data=data
                )
                if isinstance(report.longrepr, list):  # JSON turned pytest's tuple into a list
                    report.longrepr = tuple(report.longrepr)
                item.ihook.pytest_runtest_logreport(report=report)
            elif kind == "missing":
                _report_problem(self.run, item, Status.ERROR, "harness", data, started=False)
                return
            elif kind == "finish":
                item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
                self.history.append(item)
                self.cases += 1
                limit = self.run.suite.options.runner_cases
                if (limit and self.cases >= limit) or data == RETIRE:
                    self.close()  # a fresh runner for the next case (RETIRE: runtime broken)
                return

    def _hung(self, item: pytest.Item, process: RunnerProcess, started: bool) -> None:
        limit = self.run.suite.options.case_timeout
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

    def _ended(self, item: pytest.Item, process: RunnerProcess, started: bool) -> None:
        status = process.wait()
        log = process.log()
        history = self.history
        self.close()
        if not started:
            self._never_started(item, describe_status(status), diagnose(log)[1] or log)
            return
        verdict = self.run.run_dir.read_verdict(process.pid, item.nodeid)
        if verdict is not None:  # the case had its verdict; the suite's diagnostics crashed
            _report_diagnostics_crash(item, *verdict, status, log)
            return
        culprit = self.culprits.search(item, history)
        _report_crash(self.run, item, status, log, culprit)

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


def run_isolated(session: pytest.Session, run: ConformanceRun) -> None:
    """Run every collected item in runner processes; returns when all ran or the run stops."""
    items = session.items
    runner = IsolatedRunner(session, run)
    try:
        for i, item in enumerate(items):
            if session.shouldstop or session.shouldfail:
                break
            runner.run_item(item, items[i + 1] if i + 1 < len(items) else None)
    finally:
        runner.close()


def _report_crash(
    run: ConformanceRun, item: pytest.Item, status: int, log: str, culprit: Culprit | None
) -> None:
    how = describe_status(status)
    headline, detail = diagnose(log)
    what = f"the process {how} while running this case"
    if headline:
        what += f": {headline}"
    extra: dict[str, Any] = {"crash_class": crash_class(f"{how}: {headline or ''}")}
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
    item: pytest.Item, verdict: CaseRecord, longrepr: str, status: int, log: str
) -> None:
    """The case's own verdict stands; the crash of the suite's diagnostics is noted on it."""
    headline, _ = diagnose(log)
    note = f"the suite's diagnostics (blame, repro) crashed: {describe_status(status)}"
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

    def __init__(self, run: ConformanceRun) -> None:
        self.run = run
        self.runner: IsolatedRunner | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        from conformance.harness.nodes import case_of, is_scenario

        if case_of(item) is None and not is_scenario(item):
            return None
        if self.runner is None:
            self.runner = IsolatedRunner(item.session, self.run)
        self.runner.run_item(item, nextitem)
        return True

    def pytest_sessionfinish(self) -> None:
        if self.runner is not None:
            self.runner.close()


def _report_problem(
    run: ConformanceRun,
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
