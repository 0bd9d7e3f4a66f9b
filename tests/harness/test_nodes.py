"""harness/nodes.py: a node id is the suite's by the file it names, however pytest spelled it
(`--pyargs`, any rootdir, any folder: issue 31's "collected 0" under `--pyargs`)."""

from __future__ import annotations

import os

from conformance.harness.families import registry
from conformance.harness.nodes import PACKAGE_DIR, NodeJudge

CASE = "test_matches_cpu[abs-float32-contiguous-native]"
FOLDERS = registry().folders()


def is_conformance_nodeid(nodeid: str, bases: list[str]) -> bool:
    return NodeJudge(bases, FOLDERS)(nodeid)


def test_a_case_or_scenario_is_recognised_relative_to_any_base(tmp_path):
    user = str(tmp_path)  # rootdir and invocation folder far from the package
    bases = [user, user, PACKAGE_DIR, os.path.dirname(PACKAGE_DIR)]
    relative = os.path.relpath(os.path.join(PACKAGE_DIR, "test_conformance.py"), user)
    for nodeid in (
        f"test_conformance.py::{CASE}",  # --pyargs conformance: relative to the package
        f"conformance/test_conformance.py::{CASE}",  # pytest conformance from the checkout
        f"{relative}::{CASE}",  # rootdir moved by --results elsewhere
        "scenarios/test_save_load.py::test_save_load_state_dict",
        "conformance/scenarios/test_training.py::test_cnn_training",
    ):
        assert is_conformance_nodeid(nodeid, bases), nodeid


def test_other_tests_are_not_the_suites(tmp_path):
    (tmp_path / "test_conformance.py").write_text("")
    bases = [str(tmp_path), PACKAGE_DIR]
    assert not is_conformance_nodeid("tests/test_x.py::test_matches_cpu[a]", bases)
    assert not is_conformance_nodeid("test_conformance.py", bases)  # no test name
    # a file of the package that is not a test module of cases or scenarios
    assert not is_conformance_nodeid(
        "conformance/record.py::test_x", [os.path.dirname(PACKAGE_DIR)]
    )
