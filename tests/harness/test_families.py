"""The families of cases as plug-ins (harness/families): every registered family is driven
through every outcome along each path a record is made on (a runner's owner for a case its
runner could not report, an xdist controller for a dead or hung worker, the end-of-run
accounting for a case that never ran, the case's own report), with fake items. Each record names
its family and its case, keeps its status and message, and carries a repro line.

Before the families were one concept, a scenario that crashed or hung in a runner got no record
there (`not-run` at the end, its crash lost), and an xdist controller made a crash record for
op cases only."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from conformance.harness.accounting import not_run_record
from conformance.harness.families import registry
from conformance.harness.nodes import CASE_PARAM, PACKAGE_DIR, record_id
from conformance.harness.session import ConformanceRun
from conformance.harness.watch import CaseWatch
from conformance.record import CaseId, CaseRecord, Status
from tests.harness.test_cases import make_suite

NODE_IDS = {
    "ops": "conformance/test_conformance.py::test_matches_cpu[abs-float32-contiguous-native]",
    "scenarios": "conformance/scenarios/test_attention_masks.py::test_attention_mask_pipeline[x]",
    "contract": "conformance/contract/test_streams.py::test_stream_synchronize",
    "collectives": "conformance/collectives/test_collectives.py::"
    "test_collective[all_reduce-AVG-float32-33-contiguous-w2-sync]",
    "autocast": "conformance/autocast/test_autocast.py::test_autocast_policy[mm]",
    "modules": "conformance/modules/test_modules.py::"
    "test_module[nn.BatchNorm2d-float32-train-channels_last-0]",
}
OUTCOMES = [
    Status.PASSED,
    Status.FAILED,
    Status.CRASHED,
    Status.HUNG,
    Status.NOT_RUN,
    Status.XFAILED,
    Status.XPASSED,
    Status.SKIPPED,
]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return make_suite(tmp_path_factory.mktemp("families"), ops="abs", dtypes="float32")


def fake_item(nodeid: str) -> SimpleNamespace:
    """What the harness reads of a collected item: its node id, file and case parameter."""
    file = nodeid.partition("::")[0]
    path = os.path.join(os.path.dirname(PACKAGE_DIR), file)
    params = {}
    if "test_matches_cpu[" in nodeid:
        params[CASE_PARAM] = CaseId.parse(nodeid)
    return SimpleNamespace(nodeid=nodeid, path=path, callspec=SimpleNamespace(params=params))


def check(record: CaseRecord | None, family: str, status: Status, message: str) -> None:
    assert record is not None, f"{family}: no record"
    assert record.family == family
    assert record.id == record_id(NODE_IDS[family])
    assert record.status is status and record.message.endswith(message)
    assert record.repro, f"{family}: no repro line"
    assert CaseRecord.from_json(record.to_json()).family == family


def test_every_family_is_registered_and_owns_its_ids():
    families = registry()
    assert [f.name for f in families.members] == [
        "ops",
        "contract",
        "collectives",
        "modules",
        "autocast",
        "scenarios",
    ]
    for name, nodeid in NODE_IDS.items():
        assert families.of_nodeid(nodeid).name == name
        assert families.of_item(fake_item(nodeid)).name == name
        # pytest's rootdir inside the family's folder: no folder in the id
        bare = nodeid.split("/")[-1]
        assert families.of_nodeid(bare).name == name
    assert families.of_nodeid("tests/suite/test_streams.py::test_x") is None


@pytest.mark.parametrize("status", OUTCOMES, ids=[s.value for s in OUTCOMES])
@pytest.mark.parametrize("family", list(NODE_IDS))
def test_every_family_gets_one_record_of_every_outcome_on_every_path(suite, family, status):
    nodeid = NODE_IDS[family]
    message = f"[{status.value}] what happened"
    run = SimpleNamespace(started=True, suite=suite)
    # a runner's owner: a case its runner could not report (crash, hang, harness)
    owner = ConformanceRun.record_for(run, fake_item(nodeid), status, message=message)
    check(owner, family, status, message)
    # an xdist controller: a worker died running it (the message is the report's)
    report = SimpleNamespace(longrepr=message, duration=1.5, node=None)
    new = ConformanceRun.record_for_nodeid.__get__(run)
    controller = CaseWatch(SimpleNamespace(), "gw0").crash_record(nodeid, report, new)
    check(controller, family, Status.CRASHED, message)
    assert controller.duration == 1.5
    # the end of the run: a case without a record
    check(not_run_record(suite, nodeid, message), family, Status.NOT_RUN, message)


def test_an_old_record_without_a_family_gets_it_from_its_path():
    old = {"id": "test_x", "status": "passed", "path": "scenario"}
    assert CaseRecord.from_json(old).family == "scenarios"
    assert CaseRecord.from_json({**old, "path": "native"}).family == "ops"
    assert CaseRecord.from_json({**old, "path": "collectives"}).family == "collectives"


def test_manifest_keys_are_each_family_s_and_found_back_from_a_pattern(suite):
    """A family's records key the manifest by its prefix (the stale-entry check, the baseline
    writer and the expectations all read them through the registry); an op case has no key."""
    families = registry()
    keys = {}
    for family, nodeid in NODE_IDS.items():
        record = families.of_nodeid(nodeid).new_record(suite, nodeid, Status.FAILED)
        keys[family] = families.record_key(record)
    assert keys["ops"] is None
    assert keys["scenarios"] == "scenario:test_attention_mask_pipeline[x]"
    assert keys["contract"] == "contract:stream-synchronize"
    # no c10d backend on this device: the collectives case names none
    assert keys["collectives"] is None or keys["collectives"].startswith("collectives:")
    for prefix, name in (("scenario", "scenarios"), ("contract", "contract")):
        assert families.of_key(f"{prefix}:anything*").name == name
    assert families.of_key("collectives:gloo:all_reduce-*").name == "collectives"
    assert families.of_key("abs-float32-*") is None and families.of_key("nofamily:x") is None


def test_a_collectives_pattern_is_judged_against_its_own_c10d_backend_only():
    collectives = registry().named("collectives")
    keys = ["collectives:gloo:all_reduce-x", "collectives:echo:all_reduce-x"]
    assert collectives.judged_keys("collectives:gloo:*", keys) == keys[:1]
    assert registry().named("contract").judged_keys("contract:*", keys) == keys


def test_a_family_s_plan_is_made_once_per_run(suite):
    """What a family judges in the run (the collectives' c10d backend and cases) is made on
    first use and kept by the run (Family.plan); the op cases have none."""
    collectives = registry().named("collectives")
    plan = collectives.plan(suite)
    assert plan is collectives.plan(suite) and suite.family_plans["collectives"] is plan
    assert registry().named("ops").plan(suite) is None


@pytest.mark.parametrize(
    ("args", "alone"),
    [
        (["conformance/collectives"], "collectives"),
        (["conformance/collectives/test_collectives.py::test_collective"], "collectives"),
        (["conformance/contract", "conformance/contract/test_streams.py"], "contract"),
        (["conformance/collectives", "conformance/contract"], None),
        (["conformance"], None),
        ([], None),
    ],
)
def test_the_family_a_command_line_names_alone(args, alone):
    """`--collectives-set auto` means the default selection where a run is that family's alone
    (Family.make_plan reads Suite.alone)."""
    root = os.path.dirname(PACKAGE_DIR)
    config = SimpleNamespace(
        args=[os.path.join(root, a) for a in args], option=SimpleNamespace(pyargs=False)
    )
    assert registry().named_alone(config) == alone
