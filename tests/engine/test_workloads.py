"""The model-derived fallback set (engine/workloads.py): the golden list of what the workloads
reach, its format, and the walk that turns it into the overloads a backend reaches through its
boxed fallback.

After an intended change (new torch, new workload), refresh the golden list and the calls
file beside it with
    EXPECTTEST_ACCEPT=1 python -m pytest tests/engine/test_workloads.py
(or `python -m conformance.measure.record_workloads`) and review the diff.
"""

from __future__ import annotations

import functools
import json
import os

import expecttest
import pytest
import torch

from conformance.engine import workload_calls, workloads
from conformance.engine.workloads import Reach


@functools.cache
def _recording() -> workloads.Recording:
    return workloads.recording()  # one pass for both golden files


class TestGoldenList(expecttest.TestCase):
    def _check(self, path: str, recorded: str) -> None:
        if os.environ.get("EXPECTTEST_ACCEPT") == "1":
            with open(path, "w") as f:
                f.write(recorded)
        self.assertTrue(os.path.exists(path), f"no {path} for torch {torch.__version__}")
        with open(path) as f:
            self.assertMultiLineEqual(
                f.read(),
                recorded,
                f"{path} is out of date: EXPECTTEST_ACCEPT=1 python -m pytest {__file__}",
            )

    def test_recorded_workloads_match_the_golden_list(self):
        pytest.importorskip("transformers")
        self._check(workloads.golden_path(), workloads.golden_text(_recording().graph))

    def test_recorded_calls_match_the_golden_calls(self):
        pytest.importorskip("transformers")
        path = workloads.calls_path(workloads.golden_path())
        self._check(path, workloads.calls_text(_recording().calls))


def test_golden_list_round_trips():
    graph = {
        "addmm": Reach({"cnn"}, set()),
        "addmm.out": Reach(set(), {"addmm"}),
        "copy_": Reach({"qwen", "cnn"}, {"clone"}),
    }
    text = workloads.golden_text(graph)
    assert "copy_  # workloads: cnn, qwen; inside: clone" in text
    assert workloads.parse_golden(text) == graph


def test_calls_file_round_trips_and_keeps_a_few_varied_calls_per_overload():
    def call(shape, dtype="float32", dim=-1):
        return {"op": "_softmax", "args": [{"tensor": dtype, "shape": shape}, dim, False]}

    candidates = [call([2, 3]), call([4, 5, 6]), call([8, 9]), call([1, 2], dim=0), call([3])]
    candidates.append(call([2], "int64"))
    kept = workload_calls.select_calls(candidates, limit=4)
    # the largest first, then another dtype, other options (dim=0), then the largest left
    assert kept == [call([4, 5, 6]), call([2], "int64"), call([1, 2], dim=0), call([8, 9])]
    assert workload_calls.select_calls(list(reversed(candidates)), limit=4) == kept  # stable
    text = workloads.calls_text({"_softmax": kept, "abs": [{"op": "abs", "args": []}]})
    assert text.splitlines()[-1] == '{"op": "abs", "args": []}'  # sorted by overload
    assert all(json.loads(line) for line in text.splitlines())
    assert workloads.parse_calls(text) == {
        "_softmax": sorted(kept, key=json.dumps),
        "abs": [{"op": "abs", "args": []}],
    }


def test_calls_are_recorded_with_integer_values_and_options():
    recorder = workload_calls.OverloadRecorder()
    weight, ids = torch.randn(10, 4), torch.tensor([[1, 2, 9], [0, 3, 3]])
    with recorder:
        torch.nn.functional.embedding(ids, weight)
        torch.full((2,), float("-inf"), dtype=torch.float32)
    (embedding,) = recorder.calls["embedding"].values()
    assert embedding["args"][0] == {"tensor": "float32", "shape": [10, 4]}  # no float values
    assert embedding["args"][1]["values"] == [1, 2, 9, 0, 3, 3]
    # inside embedding's composite kernel (on meta copies): the index view keeps its values
    (inside,) = recorder.calls["index_select"].values()
    assert inside["args"][2] == {"tensor": "int64", "shape": [6], "values": [1, 2, 9, 0, 3, 3]}
    (full,) = recorder.calls["full"].values()
    assert full["args"] == [[2], {"float": "-inf"}]
    assert full["kwargs"]["dtype"] == {"dtype": "float32"} and full["result"] == "float32"
    json.dumps(full, allow_nan=False)


def test_nearest_calls_file_follows_the_nearest_list(tmp_path):
    for name in ("torch-2.8.txt", "torch-2.13.txt"):
        (tmp_path / name).write_text("abs  # workloads: w\n")
    (tmp_path / "torch-2.8-calls.jsonl").write_text('{"op": "abs", "args": []}\n')
    nearest = workloads.nearest_calls_path
    assert nearest("2.12.1", str(tmp_path)).endswith("torch-2.8-calls.jsonl")
    assert nearest("2.13.0", str(tmp_path)) is None  # this minor's list has no calls file
    assert nearest("2.13.0", str(tmp_path / "missing")) is None


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
