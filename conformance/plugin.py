"""The pytest plugin: declares the options, parametrises the generated test, registers objects.

Registered as the `conformance` pytest11 entry point, and by conformance/conftest.py when the
package is not installed. All state and every other hook live in `ConformanceRun`
(harness/session.py); the options are declared in harness/options.py.
"""

from __future__ import annotations

import pytest

from conformance.harness.families import registry
from conformance.harness.nodes import CASE_PARAM
from conformance.harness.options import add_options
from conformance.harness.session import PLUGIN_NAME, ConformanceRun, run_of


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, registry().option_classes().values())


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(ConformanceRun(config), PLUGIN_NAME)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per case; manifest entries with status skip/crash mark their cases skipped."""
    if CASE_PARAM not in metafunc.fixturenames:
        return
    try:
        suite = run_of(metafunc.config).suite
    except pytest.UsageError as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    params = []
    # only what -k keeps (harness/keyword.py) and this shard runs (--shard): no item is built
    # for a case another shard runs or -k would deselect
    for case in suite.case_list.collected_cases():
        entry = suite.expectations.expectation(case)
        marks = []
        if entry is not None and entry.status in ("skip", "crash"):
            marks.append(pytest.mark.skip(reason=f"{entry.status}: {entry.describe()}"))
        params.append(pytest.param(case, id=str(case), marks=marks))
    metafunc.parametrize(CASE_PARAM, params)


@pytest.fixture
def conformance_suite(request: pytest.FixtureRequest):
    """The run's Suite: the backend under test, its cases and expectations."""
    return run_of(request.config).suite
