"""One conformance run inside pytest: the object `plugin.py` registers, and every hook it needs.

`ConformanceRun` holds the run's state (the `Suite`, the isolation `Plan`, the `Recorder`,
run.json) and knows which process it is in (`Role`): a plain pytest process runs the cases in
runner processes (forked or spawned, isolation.py) and writes the results; under pytest-xdist
each worker runs and writes its own cases and the controller only reports workers that died or
hung; a runner only runs cases and sends its reports to its parent.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import shutil
import signal
import tempfile
import time
import warnings
from collections import Counter
from enum import Enum
from typing import TYPE_CHECKING, Any

import pytest

from conformance.engine.foundations import Blame
from conformance.errors import ConformanceUsageError
from conformance.findings import group_findings
from conformance.harness.expectations import scenario_key
from conformance.harness.nodes import (
    PACKAGE_DIR,
    case_of,
    is_conformance_nodeid,
    is_scenario,
    node_bases,
    record_id,
)
from conformance.harness.options import read_options
from conformance.harness.recorder import Recorder, now, run_info
from conformance.harness.rundir import RunDir
from conformance.harness.terminal import Summary, Terminal
from conformance.record import TEST_NAME, CaseId, CaseRecord, Status, missing_kernel

if TYPE_CHECKING:
    from conformance.harness.isolation import Plan
    from conformance.harness.suite import Suite

PLUGIN_NAME = "conformance-run"
RECORD_PROPERTY = "conformance"  # name of the record in a report's user_properties
# statuses a case's record decides itself; any other comes from pytest's outcome
_DECIDED = frozenset(
    {
        Status.XPASSED,
        Status.CRASHED,
        Status.HUNG,
        Status.UNSUPPORTED,
        Status.ERROR,
        Status.BLOCKED,
        Status.TORCH_BUG,
    }
)
# torch warns at every torch.manual_seed when the device module lacks manual_seed_all: the run
# header says it once instead
SEED_WARNING = r"Set seed for `?\w+`? device does not take effect"
WATCH_DIR_KEY = "conformance_watch_dir"  # xdist: where workers note the case they run
MAX_WORKER_RESTARTS = 1000  # --max-worker-restart unless given (workers rarely die: isolation.py)


class Role(Enum):
    """Which process this is."""

    SINGLE = "single"  # plain pytest: runs the cases (itself or in runner processes), writes
    XDIST_CONTROLLER = "xdist-controller"  # runs nothing; reports workers that crashed or hung
    XDIST_WORKER = "xdist-worker"  # runs its share of the cases, writes cases-<gwN>.jsonl
    FORKED_CHILD = "forked-child"  # runs cases for its parent; writes nothing
    SPAWNED_RUNNER = "spawned-runner"  # a fresh pytest running cases for its parent; no writes


def role_of(config: pytest.Config) -> Role:
    from conformance.harness.runners import RUNNER_ENV

    if RUNNER_ENV in os.environ:
        return Role.SPAWNED_RUNNER
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
        self.plan: Plan | None = None
        self.recorder: Recorder | None = None
        self.info: dict[str, Any] | None = None
        self.watch_dir: str | None = getattr(config, "workerinput", {}).get(WATCH_DIR_KEY)
        self._own_watch_dir = False
        if getattr(config.option, "maxworkerrestart", "") is None and self._targets_conformance():
            # a crash costs one case, never the run: xdist's default (4 x -n restarts, then
            # it stops scheduling) would leave the rest of the cases unrun
            config.option.maxworkerrestart = str(MAX_WORKER_RESTARTS)
        config.addinivalue_line("filterwarnings", f"ignore:{SEED_WARNING}:UserWarning")
        warnings.filterwarnings("ignore", SEED_WARNING, UserWarning)
        self.records: list[CaseRecord] = []  # every case and scenario logged by this process
        self.run_dir = RunDir.for_process(config)
        self.collected: list[str] = []  # node ids of the conformance items of the run
        self.terminal = Terminal(config, self.end_summary)
        self.interrupted_by: str | None = None  # SIGTERM, when it ended the run
        # xdist controller: workers that collected, and those that died before they did
        self.started_workers: set[str] = set()
        self.worker_start_failures: list[str] = []
        self._sigterm: Any = None  # the SIGTERM handler before ours
        config.pluginmanager.register(self.terminal, "conformance-terminal")

    @property
    def role(self) -> Role:
        """Asked when needed: xdist registers its controller after this object is created."""
        return Role.FORKED_CHILD if self.forked_child else role_of(self.config)

    # ---- the suite, created on first use (imports the backend) ------------------------------
    @property
    def suite(self) -> Suite:
        if self._suite is None:
            from conformance.harness.isolation import plan_isolation
            from conformance.harness.suite import Suite

            try:
                options = read_options(self.config)
                self._suite = Suite(
                    options,
                    self._cache_dir(),
                    self.worker,
                    invocation_dir=str(self.config.invocation_params.dir),
                    with_coverage=self.role is not Role.SPAWNED_RUNNER,
                    keyword=self.config.option.keyword,
                )
            except ConformanceUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
            self._suite.run_dir = self.run_dir
            self.plan = plan_isolation(self)
            self._suite.backend.memory_counter = self.plan.probe.memory_counter
            if self.role is Role.XDIST_WORKER and self.plan.mode in ("fork", "spawn"):
                from conformance.harness.isolation import WorkerIsolation

                self.config.pluginmanager.register(WorkerIsolation(self), "conformance-worker")
            self._open_results()
        return self._suite

    def switch_to_spawn(self, reason: str) -> None:
        """Forked runners cannot use the device any more: spawn fresh ones, and say why."""
        assert self.plan is not None
        self.plan.mode, self.plan.reason = "spawn", reason
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        line = f"conformance: {self.plan.describe(self.suite.options.case_timeout)}"
        if reporter is not None:
            reporter.write_line(line)
        if self.info is not None and self.recorder is not None:
            self.info["isolation"] = line.removeprefix("conformance: ")
            self.recorder.write_run_info(self.info)

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
        if not suite.options.results or self.role in (Role.FORKED_CHILD, Role.SPAWNED_RUNNER):
            return
        self.recorder = Recorder(suite.options.results, self.worker)
        if self.role is not Role.XDIST_WORKER:  # the process that starts the run
            import torch

            self.recorder.clear()
            self.info = run_info(
                str(torch.__version__),
                suite.backend_name,
                suite.backend.device_type,
                suite.allocator,
            )
            self.info["header"] = self.header_lines()
            # what makes shards of one run (the report merges those that agree on all of it)
            self.info["environment"] = suite.environment()
            self.info["checkers"] = suite.checkers()
            shard = suite.shard_account()
            if shard is not None:
                self.info["shard"] = shard
            if suite.coverage is not None:
                self.info["coverage"] = suite.coverage.to_json()
            self.info["modes"] = suite.mode_account()
            self.info["selection"] = suite.selection()
            self.recorder.write_run_info(self.info)

    def _targets_conformance(self) -> bool:
        """Whether the command line names the conformance package (or something inside it),
        as a path or with --pyargs."""
        for arg in self.config.args:
            text = str(arg).split("::")[0]
            if self.config.option.pyargs and (
                text == "conformance" or text.startswith("conformance.")
            ):
                return True
            path = os.path.abspath(text)
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
            self._drop_log_capture()
            if self.role in (Role.SINGLE, Role.XDIST_CONTROLLER):
                self._interrupt_on_sigterm()
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            quiet = self.config.get_verbosity() < 0  # pytest shows no header under -q
            if quiet and reporter is not None and self.role in (Role.SINGLE, Role.XDIST_CONTROLLER):
                for line in self.key_header_lines():
                    reporter.write_line(line)

    def _interrupt_on_sigterm(self) -> None:
        """A CI timeout's SIGTERM ends the run as Ctrl-C does: pytest finishes the session, so
        every case that did not run gets its not-run record (the default action would end the
        process with nothing written)."""

        def interrupt(signum: int, frame: Any) -> None:
            self.interrupted_by = signal.Signals(signum).name
            raise KeyboardInterrupt(self.interrupted_by)

        try:
            self._sigterm = signal.signal(signal.SIGTERM, interrupt)
        except ValueError:  # not the main thread: leave the signal alone
            self._sigterm = None

    def _drop_log_capture(self) -> None:
        """Cases log nothing, but pytest's log capture attaches its handler to every
        non-propagating logger (torch has dozens) three times per case: about a tenth of a
        case's time. Kept when any --log-* option or log_* ini setting asks for logs."""
        config = self.config
        asked = any(config.getoption(o, None) for o in ("log_level", "log_cli_level", "log_file"))
        asked = asked or any(config.getini(n) for n in ("log_cli", "log_level", "log_file"))
        plugin = config.pluginmanager.get_plugin("logging-plugin")
        if plugin is not None and not asked:
            config.pluginmanager.unregister(plugin)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """Run the cases in runner processes (isolation.py) unless xdist runs them; in a
        spawned runner, run the cases the parent asked for."""
        if self.role is Role.SPAWNED_RUNNER:
            from conformance.harness.runners import serve_spawned

            serve_spawned(session)  # never returns
        if not self.started or self.role is not Role.SINGLE:
            return None
        if self.plan is None or self.plan.mode not in ("fork", "spawn"):
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
        """Foundation cases run first, -grad cases after every forward case and the scenarios
        last (so the first failure of a run names the op that is wrong); --ops/--fallback-ops
        name the overloads to test: the scenarios then stay out; with --shard each runs in one
        shard."""
        if not self.started:
            return
        from conformance.engine.foundations import ORDER

        def rank(item: pytest.Item) -> int:
            case = case_of(item)
            if case is None:
                return 3 if is_scenario(item) else 1
            if case.values == "grad":  # a backward runs other ops' kernels: after every forward
                return 2
            return 0 if case.overload in ORDER else 1

        # stable: foundations, the other forward cases, every -grad case, then the scenarios
        items.sort(key=rank)
        scenarios = [item for item in items if is_scenario(item)]
        for item in scenarios:
            self._expect_scenario(item)
        if self.suite.options.ops or self.suite.options.fallback_ops:
            dropped = scenarios
        else:  # --shard: each scenario runs in one shard
            keeps = self.suite.shard_keeps([record_id(item.nodeid) for item in scenarios])
            dropped = [item for item, keep in zip(scenarios, keeps, strict=True) if not keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item not in dropped]

    def _expect_scenario(self, item: pytest.Item) -> None:
        """A manifest entry naming a scenario (`scenario:<name>`): xfail (strict: a pass fails
        with "remove this entry"), skip and crash skip it; unsupported lets it skip when the
        device lacks a kernel it needs (scenarios/conftest.py)."""
        entry = self.suite.scenario_expectation(record_id(item.nodeid))
        if entry is None:
            return
        if entry.status == "xfail":
            item.add_marker(pytest.mark.xfail(strict=True, reason=entry.describe()))
        elif entry.status in ("skip", "crash"):
            item.add_marker(pytest.mark.skip(reason=f"{entry.status}: {entry.describe()}"))

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        if not self.started:
            return None
        return ["conformance: " + line for line in self.header_lines()]

    def header_lines(self) -> list[str]:
        """What the run tests with what: backend, isolation, the source of every check,
        coverage (also in run.json)."""
        import torch

        from conformance.engine.memory import sources

        suite = self.suite
        b = suite.backend
        caps = ", ".join(b.capabilities()) or "none"
        files = ", ".join(suite.manifest.files) or "none"
        lines = [
            f"backend {b.module_name} ({b.how_loaded}; device '{b.device_type}', allocator "
            f"{suite.allocator}), torch {torch.__version__}; backend hooks: {caps}",
            *(f"{name} relies on {how}" for name, how in suite.relies_on().items()),
        ]
        if self.plan is not None:
            lines.append(self.plan.describe(suite.options.case_timeout))
        checks = sources(b, b.memory_counter)
        checks["fallback path"] = self._fallback_source()
        checks["seeding"] = self._seeding_source()
        lines.append("checks: " + "; ".join(f"{k}: {v}" for k, v in checks.items()))
        shard = suite.shard_line()
        if shard is not None:
            lines.append(shard)
        if suite.coverage is not None:
            lines += suite.coverage.header_lines()
        lines += suite.mode_lines()
        lines.append(f"expectations: {files}; results: {suite.options.results or 'off'}")
        return lines

    def key_header_lines(self) -> list[str]:
        """The header's key lines (backend, isolation, coverage, expectations): shown under -q
        too, the first one again in the summary."""
        import torch

        suite = self.suite
        b = suite.backend
        lines = [
            f"backend {b.module_name} ({b.how_loaded}; device '{b.device_type}', allocator "
            f"{suite.allocator}), torch {torch.__version__}"
        ]
        if self.plan is not None:
            lines.append(self.plan.describe(suite.options.case_timeout))
        if suite.coverage is not None:
            lines.append(suite.coverage.header_lines()[0])
        files = ", ".join(suite.manifest.files) or "none"
        lines.append(f"expectations: {files}; results: {suite.options.results or 'off'}")
        return ["conformance: " + line for line in lines]

    def _fallback_source(self) -> str:
        b = self.suite.backend
        if not b.can_route_fallback:
            return "registered overloads run natively only (backend has no set_fallback_routes)"
        proof = (
            "each routed call proven by fallback_counts"
            if b.hook("fallback_counts") is not None
            else "routing not proven (backend has no fallback_counts)"
        )
        keep = (
            "routes set at import kept"
            if b.hook("get_fallback_routes") is not None
            else "routes set at import are cleared by the first routed case (backend has no "
            "get_fallback_routes)"
        )
        return f"registered overloads also routed by set_fallback_routes, {proof}, {keep}"

    def _seeding_source(self) -> str:
        b = self.suite.backend
        name = f"torch.{b.device_type}"
        if b.device_function("manual_seed_all") and b.device_function("_is_in_bad_fork"):
            return f"torch.manual_seed seeds the device ({name}.manual_seed_all)"
        return (
            f"torch.manual_seed does not seed the device ({name} lacks manual_seed_all or "
            "_is_in_bad_fork; torch's warning about it is silenced)"
        )

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
        if record is None and report.failed:  # the suite itself broke before deciding
            record = self.record_for(
                item, Status.ERROR, check="harness", message=_first_line(report.longrepr)
            )
        elif record is None:  # never ran: skipped by a manifest entry
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else None
            record = self.record_for(item, Status.SKIPPED, message=reason)
            entry = self.suite.expectation(case_of(item)) if record is not None else None
            if record is not None and entry is not None:
                record.extra.update(expected_by=entry.source, category=entry.category)
        report.user_properties.append((RECORD_PROPERTY, record.to_json()))

    def scenario_record(self, item: pytest.Item, report: pytest.TestReport) -> CaseRecord:
        """The result record of an end-to-end scenario (conformance/scenarios)."""
        import torch

        from conformance.harness.suite import undeclared

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
            repro=suite.repro(item.nodeid, str(item.path)),
            torch=str(torch.__version__),
            backend=suite.backend_name,
            allocator=suite.allocator,
        )
        entry = suite.scenario_expectation(record.id)
        if entry is not None:
            record.extra.update(expected_by=entry.source, category=entry.category)
        strict_pass = report.failed and (message or "").startswith("[XPASS(strict)]")
        if strict_pass or (entry is not None and entry.status == "unsupported" and report.passed):
            assert entry is not None
            record.status, record.check = Status.XPASSED, None
            record.message = (
                f"unexpected pass: the scenario {record.id} passes now; remove the entry "
                f"{entry.matching(scenario_key(record.id))!r} from {entry.source}"
            )
            report.outcome, report.longrepr = "failed", record.message  # type: ignore[assignment]
            return record
        if report.skipped and (message or "").startswith("unsupported"):
            record.status = Status.UNSUPPORTED
        try:
            found = suite.scenario_blame(message or "") if report.failed else Blame()
        except Exception as exc:  # noqa: BLE001 - blame annotates; the record stays
            found = Blame()
            record.extra["blame"] = f"blame could not be computed: {type(exc).__name__}: {exc}"
        missing = missing_kernel(message) if report.failed else None
        if missing is not None and found.blocked_by is None:
            record.check = "unsupported"
            record.message = undeclared(
                f"[unsupported] the device has no kernel for {missing}, which this scenario "
                f"needs ({message})"
            )
        probe = found.blocked_by
        if found.related is not None:
            record.extra["related_foundation"] = found.related.case
            record.message = f"{message}\n  might be related: {found.related.describe()} is broken"
        if probe is not None:  # a scenario reads every result back through _copy_from
            record.status = Status.BLOCKED
            record.blocked_by = probe.case
            record.extra["blocked_by_message"] = f"{probe.what}: {probe.message}"
            record.extra["blocked_by_probe"] = probe.message
            record.message = f"[blocked] {probe.headline()}; own failure: {message}"
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

    # ---- per-case time limit where no parent supervises (xdist workers, --isolate none) -------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        """Arm faulthandler's watchdog (a C thread: it fires even when a kernel holds the GIL)
        for one item; past the limit it prints every stack and ends the process. Under xdist
        the controller reads the note left here and marks the case hung."""
        limit = self.suite.options.case_timeout if self.started else 0
        armed = bool(limit) and self.role in (Role.XDIST_WORKER, Role.SINGLE)
        if armed and self.plan is not None:  # else the runner's owner supervises the case
            armed = self.plan.mode == "in-process"
        if armed:
            if self.watch_dir:
                note = {"nodeid": item.nodeid, "started": time.time(), "limit": limit}
                with open(os.path.join(self.watch_dir, f"{self.worker}.json"), "w") as f:
                    json.dump(note, f)
            faulthandler.dump_traceback_later(limit, exit=True)
        try:
            yield
        finally:
            if armed:
                faulthandler.cancel_dump_traceback_later()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist controller: give every worker the folder for its running-case note."""
        if self.watch_dir is None:
            self.watch_dir = tempfile.mkdtemp(prefix="conformance-watch-")
            self._own_watch_dir = True
        node.workerinput[WATCH_DIR_KEY] = self.watch_dir

    def _hung(self, crashitem: str, worker: str) -> float | None:
        """The time limit a worker's case ran past, if its note says it did."""
        try:
            with open(os.path.join(self.watch_dir or "", f"{worker}.json")) as f:
                note = json.load(f)
        except (OSError, ValueError):
            return None
        if note.get("nodeid") != crashitem:
            return None
        return note["limit"] if time.time() - note["started"] >= note["limit"] else None

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        """xdist: a worker died (or was ended by the time limit) running `crashitem`; its line
        is written here, by the controller."""
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "")
        limit = self._hung(crashitem, worker)
        if limit is not None:
            status, check = Status.HUNG, "hang"
            message = (
                f"[hang] the case ran past its time limit of {limit:g} s (--case-timeout); "
                f"worker {worker} was stopped"
            )
        else:
            status, check, message = Status.CRASHED, "crash", "[crash] " + str(report.longrepr)
        report.longrepr = message
        if self.recorder is None or not crashitem.split("::")[-1].startswith(TEST_NAME + "["):
            return
        record = self.suite.new_record(
            CaseId.parse(crashitem), status, crashitem, check=check, message=message
        )
        record.duration = round(report.duration, 6)
        self.records.append(record)
        self.write(record)

    # ---- accounting: every collected case ends with exactly one record ----------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.started and self.role is Role.SINGLE:
            self.collected = [i.nodeid for i in session.items if case_of(i) or is_scenario(i)]
        if self.started:
            # torch, OpInfo's op_db and the case list are alive for the whole run: leave them out
            # of every later collection (the leak check's gc.collect, pytest's collections at
            # exit: seconds each over that heap) and out of copy-on-write in forked runners
            gc.freeze()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        """xdist controller: every worker collects the same items; the first list counts."""
        self.started_workers.add(node.gateway.id)
        if self.started and not self.collected:
            bases = node_bases(self.config)
            self.collected = [i for i in ids if is_conformance_nodeid(i, bases)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error: object | None) -> None:
        """xdist controller: a worker that died before it collected (the backend failed to load
        there, a probe failed) would fail the same way every time xdist replaced it, so the
        run stops instead (with --max-worker-restart set high for crashes, xdist would replace
        it until memory ran out)."""
        if error is None or node.gateway.id in self.started_workers or not self.started:
            return
        self.worker_start_failures.append(node.gateway.id)
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None and hasattr(dsession, "_max_worker_restart"):
            dsession._max_worker_restart = getattr(dsession, "_failed_nodes_count", 0)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Record every collected case that has no record as `not-run` (with the reason), and
        fail the run if there is one: a case that did not run is never silently missing."""
        if not self.started or self.role not in (Role.SINGLE, Role.XDIST_CONTROLLER):
            return
        if self.config.option.collectonly:
            return
        if self.worker_start_failures:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        recorded = {r.id for r in self.records}
        missing = [n for n in self.collected if record_id(n) not in recorded]
        if not missing:
            return
        stop = session.shouldstop or session.shouldfail
        if stop:
            reason = f"not run: the run stopped early ({stop})"
        elif exitstatus == pytest.ExitCode.INTERRUPTED:
            reason = f"not run: the run was interrupted ({self.interrupted_by or 'Ctrl-C'})"
        else:
            reason = (
                "not run: no result came back for this case (pytest-xdist stopped scheduling, "
                "or the process running it was lost)"
            )
        for nodeid in missing:
            record = self._not_run_record(nodeid, reason)
            self.records.append(record)
            self.write(record)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _not_run_record(self, nodeid: str, reason: str) -> CaseRecord:
        try:
            case = CaseId.parse(nodeid)
        except ValueError:  # a scenario
            import torch

            suite = self.suite
            return CaseRecord(
                id=record_id(nodeid),
                status=Status.NOT_RUN,
                op="scenario",
                overload=nodeid.rpartition("::")[2],
                path="scenario",
                message=reason,
                torch=str(torch.__version__),
                backend=suite.backend_name,
                allocator=suite.allocator,
            )
        return self.suite.new_record(case, Status.NOT_RUN, nodeid, message=reason)

    def accounting(self) -> dict[str, int]:
        """Collected vs recorded (run.json, terminal)."""
        recorded = {r.id for r in self.records}
        not_run = sum(1 for r in self.records if r.status is Status.NOT_RUN)
        return {"collected": len(self.collected), "recorded": len(recorded), "not_run": not_run}

    def end_summary(self, terminalreporter, exitstatus: int) -> Summary | None:
        """At the end of the run (after pytest's own summary, harness/terminal.py): findings,
        run.json's end, the baseline (--write-expectations), and what the summary says."""
        if not self.started or self.role in (Role.XDIST_WORKER, Role.FORKED_CHILD):
            return None
        suite = self.suite
        records = [r.to_json() for r in self.records]
        findings = group_findings(records)
        collect_only = self.config.option.collectonly  # --collect-only records nothing
        summary = Summary(
            records,
            findings,
            identity=self.key_header_lines()[0].removeprefix("conformance: "),
            coverage=suite.coverage.summary_line() if suite.coverage is not None else "",
            accounting=self.accounting() if self.collected and not collect_only else None,
            results=self.recorder.directory if self.recorder is not None else None,
            stale=suite.stale_expectations(self.records),
            unpinned=[e for e in suite.manifest.entries if e.status == "xfail" and not e.checks],
        )
        if self.worker_start_failures:
            summary.notes.append(
                f"conformance: pytest-xdist worker(s) {', '.join(self.worker_start_failures)} "
                "stopped before collecting (the error is above); the run stops instead of "
                "replacing them"
            )
        if suite.options.write_expectations and not collect_only:
            summary.notes.append(self._write_baseline(records))
        if self.info is not None and self.recorder is not None:
            stats = terminalreporter.stats
            self.info["finished"] = now()
            self.info["counts"] = dict(Counter({k: len(v) for k, v in stats.items() if k}))
            self.info["statuses"] = dict(Counter(r.status.value for r in self.records))
            self.info["accounting"] = self.accounting()
            self.info["findings"] = [f.to_json() for f in findings]
            self.info["relies_on"] = suite.relies_on()
            self.info["exitstatus"] = int(exitstatus)
            self.recorder.write_run_info(self.info)
        return None if collect_only and not summary.stale else summary

    def _write_baseline(self, records: list[dict[str, Any]]) -> str:
        """--write-expectations FILE: a manifest expecting what this run found."""
        from conformance.tools.baseline import baseline, write

        path = self.suite.options.write_expectations
        info = self.info or {}
        result = baseline([(info, records)], self.suite.manifest, source="this run")
        not_run = self.accounting()["not_run"]
        if not_run:
            result.warnings.append(f"{not_run} case(s) did not run: nothing expects them")
        write(result, path, None)
        return (
            f"conformance: wrote {path} ({result.describe()}); run again with --expectations "
            f"{path}" + "".join(f"\nconformance: warning: {w}" for w in result.warnings)
        )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
        if self.recorder is not None:
            self.recorder.close()
        if self.role is not Role.FORKED_CHILD:
            self.run_dir.remove()
        if self._own_watch_dir and self.watch_dir:
            shutil.rmtree(self.watch_dir, ignore_errors=True)


def _first_line(longrepr: Any) -> str:
    text = str(longrepr or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    return (errors[0][1:].strip() if errors else lines[-1] if lines else "")[:500]


def outcome_status(report: pytest.TestReport, record: CaseRecord) -> Status:
    """The case's status: decided by its record (crashed, xpassed, ...) or by pytest's outcome."""
    if record.status in _DECIDED:
        return record.status
    if report.when == "setup" and report.failed:
        return Status.ERROR
    if hasattr(report, "wasxfail"):
        return Status.XFAILED if report.skipped else Status.XPASSED
    return Status(report.outcome)
