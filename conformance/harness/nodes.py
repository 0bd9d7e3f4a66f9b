"""Which pytest nodes are the suite's, from an item or from a node id alone.

Node ids depend on how pytest was started (`pytest conformance` from the checkout gives
`conformance/test_conformance.py::...`; `python -m pytest --pyargs conformance` from another
folder, or a `--results` path elsewhere, moves rootdir and gives `test_conformance.py::...` or
`../...`), so a node id is resolved against every folder it can be relative to and judged by the
file it names, never by its spelling. No state, no imports of the rest of the harness.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pytest

from conformance.record import TEST_NAME, CaseId

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS_DIR = os.path.join(PACKAGE_DIR, "scenarios")
CONTRACT_DIR = os.path.join(PACKAGE_DIR, "contract")
COLLECTIVES_DIR = os.path.join(PACKAGE_DIR, "collectives")
CASE_PARAM = "conformance_case"  # the fixture the generated test is parametrised over
RECORD_PROPERTY = "conformance"  # name of the record in a report's user_properties


def is_scenario(item: pytest.Item) -> bool:
    return os.path.realpath(str(item.path)).startswith(os.path.realpath(SCENARIOS_DIR) + os.sep)


def is_contract(item: pytest.Item) -> bool:
    """A runtime contract case (conformance/contract)."""
    return os.path.realpath(str(item.path)).startswith(os.path.realpath(CONTRACT_DIR) + os.sep)


def is_contract_nodeid(nodeid: str) -> bool:
    """A contract case, from its node id alone (its file is in a folder named contract)."""
    file = nodeid.partition("::")[0]
    return os.path.basename(os.path.dirname(file)) == os.path.basename(CONTRACT_DIR)


def is_collective(item: pytest.Item) -> bool:
    """A collectives case (conformance/collectives)."""
    return os.path.realpath(str(item.path)).startswith(os.path.realpath(COLLECTIVES_DIR) + os.sep)


def is_collective_nodeid(nodeid: str) -> bool:
    """A collectives case, from its node id alone (its file is in a folder named collectives)."""
    file = nodeid.partition("::")[0]
    return os.path.basename(os.path.dirname(file)) == os.path.basename(COLLECTIVES_DIR)


def is_family(item: pytest.Item) -> bool:
    """A scenario, a contract case or a collectives case: the suite's items besides the
    generated op cases."""
    return is_scenario(item) or is_contract(item) or is_collective(item)


def case_of(item: pytest.Item) -> CaseId | None:
    """The case a generated test item runs (None for any other test)."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get(CASE_PARAM) if callspec is not None else None
    return case if isinstance(case, CaseId) else None


def record_id(nodeid: str) -> str:
    """The `id` of the record of a node: its name within the file."""
    return nodeid.split("::", 1)[-1]


def node_bases(config: pytest.Config) -> list[str]:
    """The folders a node id of this session can be relative to."""
    bases = [str(config.rootpath), str(config.invocation_params.dir)]
    families = [SCENARIOS_DIR, CONTRACT_DIR, COLLECTIVES_DIR]
    return [*bases, PACKAGE_DIR, os.path.dirname(PACKAGE_DIR), *families]


def is_conformance_nodeid(nodeid: str, bases: Iterable[str]) -> bool:
    """A generated case, a scenario or a contract case, from its node id alone (an xdist
    controller has no items): the file it names, resolved against `bases`, is the suite's."""
    file, _, name = nodeid.partition("::")
    if not name:
        return False
    package = os.path.realpath(PACKAGE_DIR) + os.sep
    families = tuple(
        os.path.realpath(d) + os.sep for d in (SCENARIOS_DIR, CONTRACT_DIR, COLLECTIVES_DIR)
    )
    for base in bases:
        path = os.path.realpath(os.path.join(base, file))
        if path.startswith(package) and os.path.isfile(path):
            return name.startswith(TEST_NAME + "[") or path.startswith(families)
    return False


def targets_conformance(config: pytest.Config) -> bool:
    """Whether the command line names the conformance package (or something inside it), as a
    path or with --pyargs."""
    for arg in config.args:
        text = str(arg).split("::")[0]
        if config.option.pyargs and (text == "conformance" or text.startswith("conformance.")):
            return True
        path = os.path.abspath(text)
        if path == PACKAGE_DIR or path.startswith(PACKAGE_DIR + os.sep):
            return True
    return False


def targets_collectives_only(config: pytest.Config) -> bool:
    """Whether every path of the command line is inside conformance/collectives (its own run:
    the default selection of collectives cases, not the default run's core one)."""
    return _targets_only(config, (COLLECTIVES_DIR,))


def targets_families_only(config: pytest.Config) -> bool:
    """Whether every path of the command line is inside a family's folder (contract,
    scenarios, collectives): the run has no op case, so nothing counts op samples."""
    return _targets_only(config, (CONTRACT_DIR, SCENARIOS_DIR, COLLECTIVES_DIR))


def _targets_only(config: pytest.Config, folders: tuple[str, ...]) -> bool:
    if not config.args:
        return False
    for arg in config.args:
        text = str(arg).split("::")[0]
        if config.option.pyargs:
            dotted = [os.path.relpath(f, os.path.dirname(PACKAGE_DIR)).replace(os.sep, ".")
                      for f in folders]  # fmt: skip
            if not any(text == d or text.startswith(d + ".") for d in dotted):
                return False
            continue
        path = os.path.abspath(text)
        if not any(path == f or path.startswith(f + os.sep) for f in folders):
            return False
    return True
