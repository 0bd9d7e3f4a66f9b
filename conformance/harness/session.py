"""One conformance run inside pytest: the object `plugin.py` registers, and every hook it needs.

`ConformanceRun` holds the run's state (the `Suite`, the `Recorder`, run.json) and knows which
process it is in (`Role`): a plain pytest process runs the cases itself or in forked children
(isolation.py) and writes the results; under pytest-xdist each worker runs and writes its own
cases and the controller only reports workers that died; a forked child only runs cases and sends
its reports to its parent.
"""

from __future__ import annotations

import os
from collections import Counter
from enum import Enum
from typing import TYPE_CHECKING, Any

import pytest

from conformance.errors import ConformanceUsageError
from conformance.findings import Finding, group_findings, unsupported_by_op
from conformance.harness.options import read_options
from conformance.harness.recorder import Recorder, now, run_info
from conformance.record import TEST_NAME, CaseId, CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite

PLUGIN_NAME = "conformance-run"
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE_PARAM = "conformance_case"  # the fixture the generated test is parametrised over
RECORD_PROPERTY = "conformance"  # name of the record in a report's user_properties
# statuses a case's record decides itself; any other comes from pytest's outcome
_DECIDED = frozenset(
    {
        Status.XPASSED,
        Status.CRASHED,
        Status.HUNG,
        Status.UNSUPPORTED,
        Status.BLOCKED,
        Status.TORCH_BUG,
    }
)


class Role(Enum):
    """Which process this is."""

    SINGLE = "single"  # plain pytest: runs the cases (itself or in forked children), writes
    XDIST_CONTROLLER = "xdist-controller"  # runs nothing; reports workers that crashed
    XDIST_WORKER = "xdist-worker"  # runs its share of the cases, writes cases-<gwN>.jsonl
    FORKED_CHILD = "forked-child"  # runs cases for its parent; writes nothing


def role_of(config: pytest.Config) -> Role:
    if hasattr(config, "workerinput"):
        return Role.XDIST_WORKER
    if config.pluginmanager.has_plugin("dsession"):
        return Role.XDIST_CONTROLLER
    return Role.SINGLE


def run_of(config: pytest.Config) -> ConformanceRun:
    """The run object registered for this pytest session."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME)


class ConformanceRun:
    """The state and the hooks of one conformance run (registered at pytest_configure)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.forked_child = False  # set by isolation.py in the children it forks
        self.worker = getattr(config, "workerinput", {}).get("workerid", "main")
        self._suite: Suite | None = None
        self.recorder: Recorder | None = None
        self.info: dict[str, Any] | None = None
        self.records: list[CaseRecord] = []  # every case and scenario logged by this process

    @property
    def role(self) -> Role:
        """Asked when needed: xdist registers its controller after this object is created."""
        return Role.FORKED_CHILD if self.forked_child else role_of(self.config)

    # ---- the suite, created on first use (imports the backend) ------------------------------
    @property
    def suite(self) -> Suite:
        if self._suite is None:
            from conformance.harness.suite import Suite

            try:
                options = read_options(self.config)
                self._suite = Suite(options, self._cache_dir(), self.worker)
            except ConformanceUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
            self._open_results()
        return self._suite

    @property
    def started(self) -> bool:
        return self._suite is not None

    def _cache_dir(self) -> str:
        """pytest's cache dir (cleared by --cache-clear), or .conformance-cache without it."""
        cache = getattr(self.config, "cache", None)
        if cache is not None:
            return str(cache.mkdir("conformance"))
        return str(self.config.rootpath / ".conformance-cache")

    def _open_results(self) -> None:
        suite = self._suite
        assert suite is not None
        if not suite.options.results or self.role is Role.FORKED_CHILD:
            return
        self.recorder = Recorder(suite.options.results, self.worker)
        if self.role is not Role.XDIST_WORKER:  # the process that starts the run
            import torch

            self.recorder.clear()
            self.info = run_info(
                str(torch.__version__),
                suite.options.backend,
                suite.backend.device_type,
                suite.allocator,
            )
            self.recorder.write_run_info(self.info)

    def _targets_conformance(self) -> bool:
        """Whether the command line names the conformance package (or something inside it)."""
        for arg in self.config.args:
            path = os.path.abspath(str(arg).split("::")[0])
            if path == PACKAGE_DIR or path.startswith(PACKAGE_DIR + os.sep):
                return True
        return False

    # ---- records ----------------------------------------------------------------------------
    def record_for(self, item: pytest.Item, status: Status, **values: Any) -> CaseRecord | None:
        """A fresh record for a conformance case item (None for other tests)."""
        case = case_of(item)
        if case is None:
            return None
        return self.suite.new_record(case, status, item.nodeid, **values)

    def write(self, record: CaseRecord) -> None:
        if self.recorder is not None:
            self.recorder.write(record)

    # ---- hooks ------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Validate options and import the backend before collection (and before xdist starts
        # its workers), so that bad input is one "ERROR: ..." line, not a collection traceback.
        if self._targets_conformance():
            self.suite  # noqa: B018 - creates it

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """Run the cases in forked children (isolation.py) unless xdist runs them."""
        if not self.started or self.role is not Role.SINGLE:
            return None
        if self.suite.options.isolate == "none":
            return None
        if session.testsfailed and not self.config.option.continue_on_collection_errors:
            return None  # let pytest report the collection errors
        if self.config.option.collectonly:
            return True
        from conformance.harness.isolation import run_isolated

        run_isolated(session, self)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        return True

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        """Foundation cases run first (so the first failure of a run names the op that is
        wrong); --ops/--fallback-ops name the overloads to test: the scenarios then stay out."""
        if not self.started:
            return
        from conformance.engine.foundations import ORDER

        def first(item: pytest.Item) -> bool:
            case = case_of(item)
            return case is not None and case.overload in ORDER

        items[:] = [i for i in items if first(i)] + [i for i in items if not first(i)]
        if not (self.suite.options.ops or self.suite.options.fallback_ops):
            return
        scenarios = os.path.join(PACKAGE_DIR, "scenarios") + os.sep
        dropped = [item for item in items if str(item.path).startswith(scenarios)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item not in dropped]

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        if not self.started:
            return None
        import torch

        suite = self.suite
        b = suite.backend
        caps = ", ".join(b.capabilities()) or "none"
        files = ", ".join(suite.manifest.files) or "none"
        return [
            f"conformance: backend {b.module_name} (device '{b.device_type}', allocator "
            f"{suite.allocator}), torch {torch.__version__}",
            f"conformance: {len(suite.registered)} registered aten overloads; "
            f"backend hooks: {caps}",
            f"conformance: expectations: {files}; results: {suite.options.results or 'off'}",
            *(f"conformance: {name} relies on {how}" for name, how in suite.relies_on().items()),
        ]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Attach the case's record to its setup/call report (so it travels to an xdist
        controller or from a forked child to its parent)."""
        outcome = yield
        report = outcome.get_result()
        if not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        if case_of(item) is None:
            if self.started and is_scenario(item):
                record = self.scenario_record(item, report)
                report.user_properties.append((RECORD_PROPERTY, record.to_json()))
            return
        from conformance.harness.suite import RECORD_KEY

        record = item.stash.get(RECORD_KEY, None)
        if record is None:  # never ran: skipped by a manifest entry, or a setup error
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else None
            record = self.record_for(item, Status.SKIPPED, message=reason)
        report.user_properties.append((RECORD_PROPERTY, record.to_json()))

    def scenario_record(self, item: pytest.Item, report: pytest.TestReport) -> CaseRecord:
        """The result record of an end-to-end scenario (conformance/scenarios)."""
        import torch

        suite = self.suite
        message = None
        if not report.passed:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = str(crash.message) if crash is not None else str(report.longrepr)
            if isinstance(report.longrepr, tuple):  # skipped: (file, line, reason)
                message = str(report.longrepr[2])
        record = CaseRecord(
            id=item.nodeid.split("::", 1)[-1],
            status=Status.PASSED,
            op="scenario",
            overload=item.name,
            dtype="-",
            layout="-",
            path="scenario",
            check="scenario" if report.failed else None,
            message=message,
            repro=f"pytest {item.nodeid}"
            + (
                "" if suite.options.backend == "echo_npu" else f" --backend {suite.options.backend}"
            ),
            torch=str(torch.__version__),
            backend=suite.options.backend,
            allocator=suite.allocator,
        )
        probe = suite.scenario_blocker() if report.failed else None
        if probe is not None:  # a scenario reads every result back through _copy_from
            record.status = Status.BLOCKED
            record.blocked_by = probe.case
            record.extra["blocked_by_message"] = f"{probe.what}: {probe.message}"
            record.message = (
                f"[blocked] blocked by {probe.case}: {probe.what}; own failure: {message}"
            )
        return record

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Write the case's line, once per case, in the process that ran it; every process but
        a forked child keeps the records for the findings of the terminal summary."""
        if self.role is Role.FORKED_CHILD:
            return
        if not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        data = dict(report.user_properties).get(RECORD_PROPERTY)
        if data is None:
            return
        record = CaseRecord.from_json(data)
        record.status = outcome_status(report, record)
        if record.status is Status.ERROR:
            record.check = record.check or "harness"
        record.duration = round(report.duration, 6)
        self.records.append(record)
        if self.role is not Role.XDIST_CONTROLLER and self.recorder is not None:
            self.write(record)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        """xdist: a worker died running `crashitem`; its line is written here, by the controller."""
        if self.recorder is None or not crashitem.split("::")[-1].startswith(TEST_NAME + "["):
            return
        message = "[crash] " + str(report.longrepr)
        record = self.suite.new_record(
            CaseId.parse(crashitem), Status.CRASHED, crashitem, check="crash", message=message
        )
        record.duration = round(report.duration, 6)
        self.records.append(record)
        self.write(record)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config) -> None:
        if not self.started or self.role in (Role.XDIST_WORKER, Role.FORKED_CHILD):
            return
        stale = self.suite.stale_expectations()
        if stale:
            terminalreporter.section("conformance: stale expectations", yellow=True)
            for entry in stale:
                terminalreporter.write_line(
                    f"entry {entry.pattern!r} at {entry.source} matches no case of the matrix; "
                    "remove it or fix the pattern"
                )
        records = [r.to_json() for r in self.records]
        findings = group_findings(records)
        write_findings(terminalreporter, records, findings)
        if self.info is not None and self.recorder is not None:
            stats = terminalreporter.stats
            self.info["finished"] = now()
            self.info["counts"] = dict(Counter({k: len(v) for k, v in stats.items() if k}))
            self.info["statuses"] = dict(Counter(r.status.value for r in self.records))
            self.info["findings"] = [f.to_json() for f in findings]
            self.info["relies_on"] = self.suite.relies_on()
            self.info["exitstatus"] = int(exitstatus)
            self.recorder.write_run_info(self.info)
            terminalreporter.write_line(
                f"conformance: per-case results in {os.path.join(self.recorder.directory, '')}"
            )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.recorder is not None:
            self.recorder.close()


def is_scenario(item: pytest.Item) -> bool:
    return str(item.path).startswith(os.path.join(PACKAGE_DIR, "scenarios") + os.sep)


def write_findings(tr, records: list[dict[str, Any]], findings: list[Finding]) -> None:
    """The terminal section: failing cases grouped into root causes, then what is not a pass."""
    if not records:
        return
    failing = sum(f.count for f in findings)
    unsupported = unsupported_by_op(records)
    bugs = [r["id"] for r in records if r["status"] == Status.TORCH_BUG.value]
    tr.section("conformance: findings", red=bool(findings), green=not findings)
    tr.write_line(
        f"{failing} failing cases = {len(findings)} finding(s) "
        f"(one per root cause; {len(records)} cases and scenarios in all)"
    )
    for i, f in enumerate(findings, 1):
        tr.write_line(f"{i:3d}. {f.title} -- {f.count} case(s) in {', '.join(f.ops[:6])}")
        rep = f.representative
        tr.write_line(f"     e.g. {rep.get('id')}")
        if rep.get("repro"):
            tr.write_line(f"     repro: {rep.get('repro')}")
    if unsupported:
        ops = ", ".join(f"{op} ({n})" for op, n in list(unsupported.items())[:12])
        more = ", ..." if len(unsupported) > 12 else ""
        tr.write_line(
            f"unsupported (device raised 'not implemented'): {sum(unsupported.values())} cases "
            f"in {len(unsupported)} op(s): {ops}{more}"
        )
    if bugs:
        tr.write_line(
            f"torch-bug (CPU disagrees with itself across layouts, the device agrees): "
            f"{len(bugs)} case(s): {', '.join(bugs[:6])}" + (", ..." if len(bugs) > 6 else "")
        )


def case_of(item: pytest.Item) -> CaseId | None:
    """The case a generated test item runs (None for any other test)."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get(CASE_PARAM) if callspec is not None else None
    return case if isinstance(case, CaseId) else None


def outcome_status(report: pytest.TestReport, record: CaseRecord) -> Status:
    """The case's status: decided by its record (crashed, xpassed, ...) or by pytest's outcome."""
    if record.status in _DECIDED:
        return record.status
    if report.when == "setup" and report.failed:
        return Status.ERROR
    if hasattr(report, "wasxfail"):
        return Status.XFAILED if report.skipped else Status.XPASSED
    return Status(report.outcome)
