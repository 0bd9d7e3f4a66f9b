"""The model-derived fallback set (engine/workloads.py): the golden list of what the workloads
reach, its format, and the walk that turns it into the overloads a backend reaches through its
boxed fallback.

After an intended change (new torch, new workload), refresh the golden list with
    EXPECTTEST_ACCEPT=1 python -m pytest tests/engine/test_workloads.py
(or `python -m conformance.tools.record_workloads`) and review the diff.
"""

from __future__ import annotations

import os

import expecttest
import pytest
import torch

from conformance.engine import workloads
from conformance.engine.workloads import Reach


class TestGoldenList(expecttest.TestCase):
    def test_recorded_workloads_match_the_golden_list(self):
        pytest.importorskip("transformers")
        path = workloads.golden_path()
        recorded = workloads.golden_text(workloads.record())
        if os.environ.get("EXPECTTEST_ACCEPT") == "1":
            with open(path, "w") as f:
                f.write(recorded)
        self.assertTrue(os.path.exists(path), f"no golden list for torch {torch.__version__}")
        with open(path) as f:
            self.assertMultiLineEqual(
                f.read(),
                recorded,
                f"{path} is out of date: EXPECTTEST_ACCEPT=1 python -m pytest {__file__}",
            )


def test_golden_list_round_trips():
    graph = {
        "addmm": Reach({"cnn"}, set()),
        "addmm.out": Reach(set(), {"addmm"}),
        "copy_": Reach({"qwen", "cnn"}, {"clone"}),
    }
    text = workloads.golden_text(graph)
    assert "copy_  # workloads: cnn, qwen; inside: clone" in text
    assert workloads.parse_golden(text) == graph


def test_reached_through_fallback_follows_composite_kernels():
    # addmm has a composite kernel that calls addmm.out; relu is the backend's own kernel
    graph = {
        "addmm": Reach({"w"}),
        "addmm.out": Reach(set(), {"addmm"}),
        "empty.memory_format": Reach(set(), {"addmm"}),
        "relu": Reach({"w"}),
        "threshold.out": Reach(set(), {"relu"}),  # only behind the native relu: not reached
        "nonzero": Reach({"w"}),
    }
    how = {
        "addmm": "default backend kernel",
        "addmm.out": "backend fallback",
        "empty.memory_format": "kernel",
        "relu": "kernel",
        "threshold.out": "backend fallback",
        "nonzero": "backend fallback",
    }
    assert workloads.reached_through_fallback(graph, how.__getitem__) == ["addmm.out", "nonzero"]


def test_nearest_golden_list(tmp_path):
    for name in ("torch-2.8.txt", "torch-2.13.txt"):
        (tmp_path / name).write_text("abs  # workloads: w\n")
    nearest = workloads.nearest_golden_path
    assert nearest("2.13.0+cpu", str(tmp_path)).endswith("torch-2.13.txt")
    assert nearest("2.12.1", str(tmp_path)).endswith("torch-2.8.txt")  # newest older one
    assert nearest("2.5.0", str(tmp_path)).endswith("torch-2.8.txt")  # else the oldest
    with pytest.raises(FileNotFoundError, match="record_workloads"):
        nearest("2.13.0", str(tmp_path / "missing"))


def test_excluded_overloads_have_reasons():
    excluded = workloads.excluded()
    assert excluded and all(reason.strip() for reason in excluded.values())
    listed = workloads.read_golden(workloads.nearest_golden_path())
    assert set(excluded) <= set(listed), "an exclusion names an overload the models never reach"


def test_echo_npu_fallback_set_is_what_the_models_reach_through_its_fallback():
    import echo_npu  # noqa: F401  (registers the device)

    from conformance.engine import discovery

    derived = workloads.model_fallback_overloads()
    assert "addmm.out" in derived  # linear layers: echo_npu has no addmm kernel
    assert "where.self_out" in derived  # SDPA's math path
    registered = set(discovery.registered_overloads())
    assert not registered & set(derived)
    assert all(discovery.how_reached(o) == "backend fallback" for o in derived)
