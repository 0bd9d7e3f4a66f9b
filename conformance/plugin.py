"""The pytest plugin: options, case generation, expectations, results. Hooks stay thin.

Registered as the `conformance` pytest11 entry point, and by conformance/conftest.py when the
package is not installed. It only acts on tests that use the `conformance_case` fixture.
"""

from __future__ import annotations

import datetime
import os
from collections import Counter

import pytest

from conformance.errors import ConformanceUsageError
from conformance.harness.options import add_options, read_options

SUITE_KEY = pytest.StashKey[object]()
RECORD_KEY = pytest.StashKey[dict]()  # per item: what the case measured, for the results line
RUN_INFO_KEY = pytest.StashKey[dict]()  # per run: run.json


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _worker(config: pytest.Config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "main")


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def _cache_dir(config: pytest.Config) -> str:
    """pytest's cache dir (cleared by --cache-clear), or .conformance-cache without it."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return str(cache.mkdir("conformance"))
    return str(config.rootpath / ".conformance-cache")


def get_suite(config: pytest.Config):
    """The run's Suite, created on first use (imports the backend)."""
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None:
        from conformance.harness.results import clear_case_files, run_info, write_run_info
        from conformance.harness.suite import Suite

        try:
            options = read_options(config)
            if options.results and _is_controller(config):
                clear_case_files(options.results)  # a new run: no lines from an earlier one
            suite = Suite(options, _cache_dir(config), _worker(config))
        except ConformanceUsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.stash[SUITE_KEY] = suite
        if options.results and _is_controller(config):
            import torch

            info = run_info(
                torch.__version__, options.backend, suite.backend.device_type, suite.allocator
            )
            config.stash[RUN_INFO_KEY] = info
            write_run_info(options.results, info)
    return suite


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _targets_conformance(config: pytest.Config) -> bool:
    """Whether the command line names the conformance package (or something inside it)."""
    for arg in config.args:
        path = os.path.abspath(str(arg).split("::")[0])
        if path == PACKAGE_DIR or path.startswith(PACKAGE_DIR + os.sep):
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # Validate options and import the backend before collection (and before xdist starts its
    # workers), so that bad input is one "ERROR: ..." line rather than a collection traceback.
    if _targets_conformance(session.config):
        get_suite(session.config)


def _xdist_active(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or config.pluginmanager.has_plugin("dsession")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Run conformance cases in forked children (see isolation.py) unless xdist runs them."""
    config = session.config
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None or _xdist_active(config) or suite.options.isolate == "none":
        return None
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return None  # let pytest report the collection errors
    if config.option.collectonly:
        return True
    from conformance.harness.isolation import run_isolated

    run_isolated(session)
    if session.shouldfail:
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)
    return True


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_case" not in metafunc.fixturenames:
        return
    try:
        suite = get_suite(metafunc.config)
    except pytest.UsageError as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    cases = suite.cases()
    marks_for = []
    for case in cases:
        entry = suite.expectation(case)
        marks = []
        if entry is not None:
            if entry.status in ("skip", "crash"):
                marks.append(pytest.mark.skip(reason=f"{entry.status}: {entry.describe()}"))
        marks_for.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("conformance_case", marks_for)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--ops/--fallback-ops name the overloads to test: the scenarios then stay out."""
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None or not (suite.options.ops or suite.options.fallback_ops):
        return
    scenarios = os.path.join(PACKAGE_DIR, "scenarios") + os.sep
    dropped = [item for item in items if str(item.path).startswith(scenarios)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture
def conformance_suite(request: pytest.FixtureRequest):
    return get_suite(request.config)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None:
        return None
    import torch

    b = suite.backend
    caps = ", ".join(b.capabilities()) or "none"
    files = ", ".join(suite.manifest.files) or "none"
    return [
        f"conformance: backend {b.module_name} (device '{b.device_type}', allocator "
        f"{suite.allocator}), torch {torch.__version__}",
        f"conformance: {len(suite.registered)} registered aten overloads; backend hooks: {caps}",
        f"conformance: expectations: {files}; results: {suite.options.results or 'off'}",
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    record = item.stash.get(RECORD_KEY, None)
    if record is not None and report.when in ("setup", "call"):
        report.user_properties.append(("conformance", dict(record)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if hasattr(report, "node"):  # xdist controller: the worker already wrote the line ...
        if report.failed and "crashed while running" in str(report.longrepr):
            _write_crash_from_xdist(report)  # ... unless the worker died running the case
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _write_result(report)


def _status(report: pytest.TestReport, record: dict) -> str:
    if record.get("status"):
        return record["status"]
    if report.when == "setup" and report.failed:
        return "error"
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return {"passed": "passed", "failed": "failed", "skipped": "skipped"}[report.outcome]


_CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG.append(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if config in _CONFIG:
        _CONFIG.remove(config)


def _write_result(report: pytest.TestReport) -> None:
    if "test_matches_cpu[" not in report.nodeid or not _CONFIG:
        return
    suite = _CONFIG[-1].stash.get(SUITE_KEY, None)
    if suite is None or suite.writer is None:
        return
    record = next((v for k, v in report.user_properties if k == "conformance"), {})
    line = {"id": report.nodeid.split("::")[-1], **suite.base_record()}
    line.update(record)
    case_id = line["id"].split("[", 1)[-1].rstrip("]")
    if "op" not in line:  # skipped before running (manifest skip/crash)
        overload, dtype, layout, path = _split_id(case_id)
        defaults = dict(
            op=overload.split(".")[0],
            overload=overload.partition(".")[2] or "default",
            dtype=dtype,
            layout=layout,
            path=path,
            check=None,
            samples=0,
            max_abs_err=None,
            max_rel_err=None,
            message=report.longrepr[2] if isinstance(report.longrepr, tuple) else None,
        )
        for key, value in defaults.items():
            line.setdefault(key, value)
    line["status"] = _status(report, record)
    if line["status"] == "error":
        line["check"] = line.get("check") or "harness"
    line["duration"] = round(report.duration, 6)
    line["repro"] = suite.repro(report.nodeid)
    suite.writer.write(line)


def _write_crash_from_xdist(report: pytest.TestReport) -> None:
    text = str(report.longrepr)
    report.user_properties.append(
        ("conformance", {"status": "crashed", "check": "crash", "message": "[crash] " + text})
    )
    _write_result(report)


def _split_id(case_id: str) -> tuple[str, str, str, str]:
    overload, dtype, layout, path = case_id.rsplit("-", 3)
    return overload, dtype, layout, path


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None or not _is_controller(config):
        return
    stale = suite.stale_expectations()
    if stale:
        terminalreporter.section("conformance: stale expectations", yellow=True)
        for entry in stale:
            terminalreporter.write_line(
                f"entry {entry.pattern!r} at {entry.source} matches no case of the matrix; "
                "remove it or fix the pattern"
            )
    info = config.stash.get(RUN_INFO_KEY, None)
    if info is not None and suite.options.results:
        from conformance.harness.results import write_run_info

        stats = terminalreporter.stats
        counts = Counter({k: len(v) for k, v in stats.items() if k})
        info["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        info["counts"] = dict(counts)
        info["exitstatus"] = int(exitstatus)
        write_run_info(suite.options.results, info)
        terminalreporter.write_line(
            f"conformance: per-case results in {os.path.join(suite.options.results, '')}"
        )
