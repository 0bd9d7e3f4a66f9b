"""One conformance run inside pytest: the object `plugin.py` registers, and every hook it needs.

`ConformanceRun` holds the run's state (the `Suite`, the isolation `Plan`, the `Recorder`,
run.json, the `Accounting`) and knows which process it is in (`roles.py`): a plain pytest
process runs the cases in runner processes (forked or spawned, isolation.py) and writes the
results; under pytest-xdist each worker runs and writes its own cases and the controller only
reports workers that died or hung; a runner only runs cases and sends its reports to its parent.
The hooks stay thin: what they decide lives in the modules they call (header.py, accounting.py,
watch.py, families/, ordering.py, case_reports.py, terminal.py).
"""

from __future__ import annotations

import gc
import os
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance.engine import heap
from conformance.engine.backend import Backend, load_backend
from conformance.engine.modes import selected
from conformance.engine.profile import DeviceProfile
from conformance.errors import ConformanceUsageError
from conformance.findings import group_findings
from conformance.harness.accounting import Accounting, not_run_record
from conformance.harness.baseline import write_run_baseline
from conformance.harness.case_reports import attach_record, ends_case, logged_record
from conformance.harness.case_warnings import CaseWarnings, QuietSetup, summary_line
from conformance.harness.exiting import end_at_exit, interrupt_on_sigterm, is_command_line
from conformance.harness.failure_reprs import shown_natively
from conformance.harness.families import registry
from conformance.harness.header import header_lines, key_header_lines
from conformance.harness.isolation import WorkerIsolation
from conformance.harness.lanes import RunnerLanes
from conformance.harness.nodes import targets_conformance
from conformance.harness.options import Options, read_options
from conformance.harness.ordering import order_items
from conformance.harness.plan import Plan, plan_isolation
from conformance.harness.recorder import Recorder
from conformance.harness.roles import Role, role_of
from conformance.harness.rundir import RunDir
from conformance.harness.runinfo import finish_info, start_info
from conformance.harness.runners import spawned_cases, spawned_profile
from conformance.harness.serving import serve_spawned
from conformance.harness.stale import stale_of_run
from conformance.harness.stored import append_run
from conformance.harness.suite import Suite
from conformance.harness.terminal import Summary, Terminal
from conformance.harness.watch import PROBE_KEY, CaseWatch, ControllerHooks
from conformance.harness.zygotes import serve_zygote
from conformance.processes.this import THIS
from conformance.record import CaseRecord, Status

PLUGIN_NAME = "conformance-run"
# torch warns at every torch.manual_seed when the device module lacks manual_seed_all: the run
# header says it once instead
SEED_WARNING = r"Set seed for `?\w+`? device does not take effect"
MAX_WORKER_RESTARTS = 1000  # --max-worker-restart unless given (workers rarely die: isolation.py)
RUNNING_ONLY = tuple(r for r in Role if not r.kind.writes_results)  # processes/kinds.py


def run_of(config: pytest.Config) -> ConformanceRun:
    """The run object registered for this pytest session."""
    return config.pluginmanager.get_plugin(PLUGIN_NAME)


class ConformanceRun:
    """The state and the hooks of one conformance run (registered at pytest_configure)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._role: Role | None = None  # role_of, kept once the suite started (role)
        self.worker = getattr(config, "workerinput", {}).get("workerid", "main")
        self._suite: Suite | None = None
        self._family_folders: set[str] | None = None  # realpaths (pytest_ignore_collect)
        self._family_names: set[str] = set()  # their last parts: most paths are not them
        self.plan: Plan | None = None
        self.recorder: Recorder | None = None
        self.info: dict[str, Any] | None = None
        self.watch = CaseWatch(config, self.worker)
        if getattr(config.option, "maxworkerrestart", "") is None and self._targets_conformance():
            # a crash costs one case, never the run: xdist's default (4 x -n restarts, then
            # it stops scheduling) would leave the rest of the cases unrun
            config.option.maxworkerrestart = str(MAX_WORKER_RESTARTS)
        config.addinivalue_line("filterwarnings", f"ignore:{SEED_WARNING}:UserWarning")
        warnings.filterwarnings("ignore", SEED_WARNING, UserWarning)
        self.records: list[CaseRecord] = []  # every case and scenario logged by this process
        self.run_dir = RunDir.for_process(config)
        self.accounting = Accounting()
        self.terminal = Terminal(config, self.end_summary)
        self._sigterm: Any = None  # the SIGTERM handler before ours
        self._session: pytest.Session | None = None  # the session that ended (exit status)
        config.pluginmanager.register(self.terminal, "conformance-terminal")
        config.pluginmanager.register(ControllerHooks(self), "conformance-xdist-controller")
        is_case = lambda item: self.started and registry().of_item(item) is not None  # noqa: E731
        config.pluginmanager.register(CaseWarnings(is_case), "conformance-case-warnings")
        self.quiet_setup = QuietSetup()  # the start's and collection's stderr held
        config.pluginmanager.register(self.quiet_setup, "conformance-quiet-setup")

    @property
    def role(self) -> Role:
        """Asked when needed: xdist registers its controller after this object is created; kept
        once the suite started (asked for every report a controller logs)."""
        if self._role is None or not self.started:
            self._role = role_of(self.config)
            THIS.known_as(self._role.value)
        return Role.FORKED_CHILD if THIS.name == Role.FORKED_CHILD.value else self._role

    # ---- the suite, created on first use (imports the backend) ------------------------------
    @property
    def suite(self) -> Suite:
        if self._suite is None:
            try:
                options = read_options(self.config, registry().option_classes())
                if self.role in (Role.SINGLE, Role.XDIST_CONTROLLER, Role.XDIST_WORKER):
                    # its CPU work is small samples; one thread keeps it able to fork its
                    # runners' zygote (processes/forking.py)
                    torch.set_num_threads(1)
                spawned = self.role in (Role.SPAWNED_RUNNER, Role.ZYGOTE)
                owner_cases = spawned_cases() if spawned else None  # what its owner collected
                backend = load_backend(options.backend, options.device)
                backend.heap_zones, backend.heap_cache = options.heap_zones, self._cache_dir()
                given = getattr(self.config, "workerinput", {}).get(PROBE_KEY)
                self.plan = plan_isolation(options, backend, self.role, given)
                backend.profile = self._profile(backend, options)
                suite = Suite(
                    options,
                    self._cache_dir(),
                    self.worker,
                    backend=backend,
                    run_dir=self.run_dir,
                    invocation_dir=str(self.config.invocation_params.dir),
                    with_coverage=not spawned and not registry().targets_only(self.config),
                    keyword=self.config.option.keyword,
                    alone=registry().named_alone(self.config),
                )
                if owner_cases is not None:
                    suite.case_list.collect_given(owner_cases)
                self._suite = suite
            except ConformanceUsageError as exc:
                raise pytest.UsageError(str(exc)) from None
            self._watch_heap()
            if self.role is Role.XDIST_WORKER and self.plan.mode in ("fork", "spawn"):
                self.config.pluginmanager.register(WorkerIsolation(self), "conformance-worker")
            self._open_results()
        return self._suite

    def _profile(self, backend: Backend, options: Options) -> DeviceProfile:
        """The device profile, learned once per run (engine/profile.py): a spawned runner gets
        its parent's whole; else the facts torch answers plus what this run's probe found."""
        if self.role in (Role.SPAWNED_RUNNER, Role.ZYGOTE):
            given = spawned_profile()
            if given is not None:
                return given
        assert self.plan is not None
        compiles = any(mode.compiled for mode in selected(options.modes))
        declared = backend.declared_profile(ask_compiler=compiles)
        return declared.with_probe(self.plan.probe.facts())

    @property
    def options(self) -> Options:
        return self.suite.options

    @property
    def backend(self) -> Backend:
        return self.suite.backend

    def _watch_heap(self) -> None:
        """The heap red zones in this process where the probe saw the device's memory go
        through them (engine/heap.py): forked runners inherit them; a probe in this process
        installed them already; the xdist controller runs no case."""
        backend = self.suite.backend
        if not backend.profile.heap_zones.value or backend.heap is not None:
            return
        if self.role is Role.XDIST_CONTROLLER:
            return
        backend.heap, _ = heap.watch(backend.module, backend.heap_zones, backend.heap_cache)

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
        if not suite.options.results or self.role in RUNNING_ONLY:
            return
        self.recorder = Recorder(suite.options.results, self.worker)
        if self.role is not Role.XDIST_WORKER:  # the process that starts the run
            self.recorder.clear()
            self.info = start_info(suite, self.plan)
            self.recorder.write_run_info(self.info)

    def _targets_conformance(self) -> bool:
        return targets_conformance(self.config)

    # ---- records ----------------------------------------------------------------------------
    def record_for(self, item: pytest.Item, status: Status, **values: Any) -> CaseRecord | None:
        """A fresh record for a conformance case item of any family (None for other tests)."""
        family = registry().of_item(item) if self.started else None
        if family is None:
            return None
        return family.new_record(self.suite, item.nodeid, status, **values)

    def record_for_nodeid(self, nodeid: str, status: Status, **values: Any) -> CaseRecord | None:
        """A fresh record for a conformance case named by its node id alone (an xdist
        controller's crashed or hung case; None for other tests)."""
        family = registry().of_nodeid(nodeid) if self.started else None
        if family is None:
            return None
        return family.new_record(self.suite, nodeid, status, **values)

    def write(self, record: CaseRecord) -> None:
        if self.recorder is not None:
            self.recorder.write(record)

    def log(self, record: CaseRecord) -> None:
        """Keep a record for the summary and write its line."""
        self.records.append(record)
        self.write(record)

    # ---- hooks ------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Validate options and import the backend before collection (and before xdist starts
        # its workers), so that bad input is one "ERROR: ..." line, not a collection traceback.
        if self._targets_conformance():
            self.suite  # noqa: B018 - creates it
            self._drop_log_capture()
            if self.role in (Role.SINGLE, Role.XDIST_CONTROLLER):
                self._sigterm = interrupt_on_sigterm(self.accounting)
            if self.role is Role.XDIST_CONTROLLER:
                gc.freeze()  # it collects nothing: torch and the suite, as collecting freezes
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            quiet = self.config.get_verbosity() < 0  # pytest shows no header under -q
            if quiet and reporter is not None and self.role in (Role.SINGLE, Role.XDIST_CONTROLLER):
                for line in key_header_lines(self.suite, self.plan):
                    reporter.write_line(line)

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """--ops/--fallback-ops leave the other families' items out (ordering.py): their
        folders are not collected at all (their modules and a thousand items: half a second of
        a narrow run)."""
        if self._suite is None or not self._suite.options.names_overloads:
            return None
        if self._family_folders is None:
            self._family_folders = {os.path.realpath(f) for f in registry().folders()}
            self._family_names = {os.path.basename(f) for f in self._family_folders}
        if collection_path.name not in self._family_names:
            return None
        return True if os.path.realpath(collection_path) in self._family_folders else None

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
            serve_spawned(session, self.suite.backend)  # never returns
        if self.role is Role.ZYGOTE:
            serve_zygote(session, self, self.suite.backend)  # never returns
        if not self.started or self.role is not Role.SINGLE:
            return None
        if self.plan is None or self.plan.mode not in ("fork", "spawn"):
            return None
        if session.testsfailed and not self.config.option.continue_on_collection_errors:
            return None  # let pytest report the collection errors
        if self.config.option.collectonly:
            return True
        RunnerLanes(session, self, self.plan.runners).run()
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        return True

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        """Foundation cases first, -grad cases after every forward case, the contract cases and
        the scenarios last; --ops/--fallback-ops or --shard leave some of them out
        (ordering.py)."""
        if not self.started:
            return
        order_items(self.suite, config, items)

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        if not self.started:
            return None
        return ["conformance: " + line for line in header_lines(self.suite, self.plan)]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Attach the case's record to its setup/call report (so it travels to an xdist
        controller or from a forked child to its parent); a case's exception is shown without
        the backend's ops (failure_reprs.py)."""
        family = registry().of_item(item) if self.started else None
        with shown_natively(item, call, family is not None):
            outcome = yield
        report = outcome.get_result()
        if family is not None and ends_case(report):
            attach_record(report, family.record_from_report(self.suite, item, report))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Write the case's line, once per case, in the process that ran it; every process but
        a forked child keeps the records for the findings of the terminal summary."""
        if self.role is Role.FORKED_CHILD:
            return
        if not ends_case(report):
            return
        record = logged_record(report)  # its status decided (case_reports.py)
        if record is None:
            return
        self.records.append(record)
        if self.role is not Role.XDIST_CONTROLLER and self.recorder is not None:
            self.write(record)

    # ---- per-case time limit where no parent supervises (xdist workers, --isolate none) -------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        """Arm the watchdog for one item (watch.py); past the limit it prints every stack and
        ends the process. Under xdist the controller reads the note and marks the case hung."""
        limit = self.suite.options.case_timeout if self.started else 0
        armed = bool(limit) and self.role in (Role.XDIST_WORKER, Role.SINGLE)
        if armed and self.plan is not None:  # else the runner's owner supervises the case
            armed = self.plan.mode == "in-process"
        if armed:
            self.watch.arm(item.nodeid, limit)
        try:
            yield
        finally:
            if armed:
                self.watch.disarm()

    # ---- accounting: every collected case ends with exactly one record ----------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.started and self.role is Role.SINGLE:
            self.accounting.items_collected(session.items)
        if self.started:
            # torch, OpInfo's op_db and the case list are alive for the whole run: leave them out
            # of every later collection (the leak check's gc.collect, pytest's collections at
            # exit: seconds each over that heap) and out of copy-on-write in forked runners
            gc.freeze()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Record every collected case that has no record as `not-run` (with the reason), and
        fail the run if there is one: a case that did not run is never silently missing."""
        if not self.started or self.role not in (Role.SINGLE, Role.XDIST_CONTROLLER):
            return
        self._session = session
        if self.config.option.collectonly:
            return
        if self.accounting.worker_start_failures:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        missing = self.accounting.missing(self.records)
        if not missing:
            return
        reason = self.accounting.not_run_reason(session, exitstatus)
        for nodeid in missing:
            self.log(not_run_record(self.suite, nodeid, reason))
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def end_summary(self, terminalreporter, exitstatus: int) -> Summary | None:
        """At the end of the run (after pytest's own summary, harness/terminal.py): findings,
        run.json's end, the baseline (--write-expectations), and what the summary says."""
        if not self.started or self.role in (Role.XDIST_WORKER, Role.FORKED_CHILD):
            return None
        suite = self.suite
        coverage = suite.case_list.coverage
        records = self.records
        findings = group_findings(records)
        collect_only = self.config.option.collectonly  # --collect-only records nothing
        counts = self.accounting.counts(self.records)
        summary = Summary(
            records,
            findings,
            identity=key_header_lines(suite, self.plan)[0].removeprefix("conformance: "),
            coverage=coverage.summary_line() if coverage is not None else "",
            accounting=counts if self.accounting.collected and not collect_only else None,
            results=self.recorder.directory if self.recorder is not None else None,
            stale=stale_of_run(suite, self.config, self.records),
            unpinned=[e for e in suite.manifest.entries if e.status == "xfail" and not e.checks],
        )
        suite.samples.summary.save()  # what the stale-entry check derived (all of the matrix)
        summary.notes += registry().end_notes(records)
        lines = [summary_line(records), self.quiet_setup.summary_line()]
        summary.notes += [f"conformance: {line}" for line in lines if line]
        note = self.accounting.start_failure_note()
        if note is not None:
            summary.notes.append(note)
        if suite.options.write_expectations and not collect_only:
            summary.notes.append(
                write_run_baseline(suite, self.info or {}, records, counts["not_run"])
            )
        if self.info is not None and self.recorder is not None:
            stats = terminalreporter.stats
            finish_info(self.info, suite, stats, self.records, counts, findings, exitstatus)
            self.info["capture_warnings"] = self.quiet_setup.to_json()
            self.recorder.write_run_info(self.info)
            if suite.options.store:
                summary.notes.append(append_run(suite.options.store, self.recorder.directory))
        return None if collect_only and not summary.stale else summary

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._session is not None and is_command_line(config):
            if not self.suite.options.exit_teardown:
                end_at_exit(self._session)
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
        if self.recorder is not None:
            self.recorder.close()
        if self.role is not Role.FORKED_CHILD:
            self.run_dir.remove()
        self.watch.remove()
