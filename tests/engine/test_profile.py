"""The device profile (engine/profile.py): one frozen object with how each fact was learned,
whole in child processes, and the capability query `python -m conformance.profile` on backends
of three shapes (echo_npu, the Python-registered pyreg_npu, torch's own lazy device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from conformance.engine.profile import NEEDS, DeviceProfile, Fact
from conformance.harness import runners
from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]


def _lazy_profile() -> DeviceProfile:
    declared = DeviceProfile.declared("lazy", "Lazy", "torch._lazy", None, None)
    return declared.with_probe({"storage": Fact(False, "probed in a forked child")})


def test_the_profile_is_frozen_and_travels_whole() -> None:
    profile = _lazy_profile()
    with pytest.raises(FrozenInstanceError):
        profile.storage = Fact(True, "x")  # type: ignore[misc]
    again = DeviceProfile.from_json(json.loads(profile.dumps()))
    assert again == profile
    assert again.storage.how == "probed in a forked child"


def test_a_missing_need_has_one_reason() -> None:
    profile = _lazy_profile()
    assert profile.missing(["storage"]) == NEEDS["storage"][1]
    assert profile.missing(["lazy runtime", "no storage"]) is None
    eager = DeviceProfile.declared("npu", "PrivateUse1", None, None, None).with_probe(
        {"device_count": Fact(2, "probed"), "second_index": Fact(1, "probed")}
    )
    assert (
        eager.missing(["lazy runtime"]) == "the device has no lazy runtime (torch_xla, torch._lazy)"
    )
    assert eager.second_index.value == 1 and eager.missing(["second device"]) is None


def test_a_spawned_runner_reads_its_parent_s_profile(monkeypatch) -> None:
    profile = _lazy_profile()
    job = {"cmd": 3, "out": 4, "replay": False, "profile": profile.to_json()}
    monkeypatch.setenv(runners.RUNNER_ENV, json.dumps(job))
    assert runners.spawned_profile() == profile
    monkeypatch.setenv(runners.RUNNER_ENV, json.dumps({"cmd": 3}))
    assert runners.spawned_profile() is None


def _query(*args: str) -> subprocess.CompletedProcess:
    env = clean_env({"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "backends"), str(REPO)])})
    return subprocess.run(
        [sys.executable, "-m", "conformance.profile", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, expect",
    [
        ((), {"device_type": "npu", "storage": True, "lazy_runtime": None, "streams": True}),
        (
            ("--backend", "pyreg_npu:register_devices"),
            {"device_type": "pyreg", "storage": True, "fork_safe": None},
        ),
        (
            ("--backend", "lazy_backend:register", "--device", "lazy"),
            {"device_type": "lazy", "storage": False, "lazy_runtime": "torch._lazy"},
        ),
    ],
    ids=["echo_npu", "pyreg_npu", "torch._lazy"],
)
def test_the_capability_query_prints_every_fact_and_how(args, expect) -> None:
    start = time.monotonic()
    proc = _query(*args)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 30, f"the capability query took {took:.1f} s"
    out = json.loads(proc.stdout)
    profile = out["profile"]
    for name, value in expect.items():
        got = profile[name] if name == "device_type" else profile[name]["value"]
        assert got == value, (name, profile[name])
    facts = set(DeviceProfile.from_json(profile).to_json()) - {"device_type"}
    assert facts == set(profile) - {"device_type"}
    assert all(profile[f]["how"] != "not probed" for f in facts - {"fork_safe"}), profile
    if expect["storage"] is False:  # the checks by pointer cannot run: said once, with why
        assert set(out["checks_left_out"]) == {"aliasing", "view"}
    else:
        assert set(out["checks_left_out"]) == {"write-through"}


def test_the_capability_query_refuses_bad_input_in_one_line() -> None:
    proc = _query("--backend", "no_such_backend_module")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: backend module 'no_such_backend_module' is not importable: install it or pass "
        "--backend MODULE"
    )
