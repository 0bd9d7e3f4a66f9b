"""The `models` value set (samples/models.py): the calls the model workloads made, recorded by
engine/workloads.py into the calls file beside the golden list, rebuilt for a case's dtype."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import workload_calls, workloads
from conformance.engine.calls import Call
from conformance.engine.discovery import overload_name, resolve
from conformance.samples import models


@pytest.fixture
def recorded(monkeypatch):
    """Replace the calls file with what a recorder saw (returns a function that records)."""

    def use(run) -> dict[str, list[dict]]:
        recorder = workload_calls.OverloadRecorder()
        with recorder:
            run()
        kept = {
            o: workload_calls.select_calls([c for c in calls.values() if c])
            for o, calls in recorder.calls.items()
        }
        parsed = workloads.parse_calls(workloads.calls_text(kept))
        monkeypatch.setattr(models, "_recorded", lambda: parsed)
        return parsed

    return use


def _seen(run) -> dict[str, list[tuple]]:
    """{overload: [(args, kwargs)]} as the dispatcher passed them."""
    seen: dict[str, list[tuple]] = {}

    class Spy(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.setdefault(overload_name(func.name()), []).append((args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    with Spy():
        run()
    return seen


def _describe(tree):
    return torch.utils._pytree.tree_map(
        lambda x: (x.dtype, tuple(x.shape)) if isinstance(x, torch.Tensor) else x, tree
    )


def _model_step():
    ids = torch.tensor([[3, 1, 4], [1, 5, 9]])
    weight = torch.randn(10, 8)
    hidden = torch.nn.functional.embedding(ids, weight)
    out = torch.nn.functional.linear(hidden.reshape(6, 8), torch.randn(4, 8), torch.randn(4))
    scores = out.softmax(-1)
    mask = torch.tensor([True, False, True, False, False, True]).reshape(6, 1)
    scores.masked_fill_(mask, torch.finfo(torch.float32).min)


def test_recorded_calls_round_trip_to_the_calls_the_dispatcher_saw(recorded):
    recorded(_model_step)
    seen = _seen(_model_step)
    for overload in ("embedding", "addmm", "_softmax", "masked_fill_.Scalar"):
        (args, kwargs), *_ = seen[overload]
        (call,) = models.model_calls(overload, torch.float32, [])
        assert call.overload == overload
        assert _describe(call.args) == _describe(tuple(args))  # positional as recorded
        assert _describe(call.kwargs) == _describe(kwargs)
        resolve(overload)(*call.args, **call.kwargs)
    (call,) = models.model_calls("embedding", torch.float32, [])
    assert call.args[1].tolist() == [[3, 1, 4], [1, 5, 9]]  # the ids as the model had them
    (call,) = models.model_calls("masked_fill_.Scalar", torch.float32, [])
    assert call.args[1].flatten().tolist() == [True, False, True, False, False, True]
    assert call.args[2] == torch.finfo(torch.float32).min


def test_float16_cases_get_float16_operands_in_range(recorded):
    recorded(_model_step)
    for overload in ("embedding", "addmm", "_softmax", "masked_fill_.Scalar"):
        (call,) = models.model_calls(overload, torch.float16, [])
        floats = [t for t in call.tensors() if t.is_floating_point()]
        assert floats and all(t.dtype == torch.float16 for t in floats), call.signature()
        resolve(overload)(*call.args, **call.kwargs)  # (the fill value fits float16)
    (call,) = models.model_calls("masked_fill_.Scalar", torch.float16, [])
    assert call.args[2] == torch.finfo(torch.float16).min  # what a float16 model fills with
    assert models.model_calls("embedding", torch.int64, []) == []  # its data operand is float
    (call,) = models.model_calls("embedding", torch.bfloat16, [])
    assert call.args[1].dtype == torch.int64  # the indices keep theirs


def test_floating_values_come_from_the_ordinary_samples(recorded):
    recorded(lambda: torch.log(torch.rand(3, 4) + 1))
    ordinary = [Call("log", (torch.tensor([2.0, 3.0, 5.0]),))]
    (call,) = models.model_calls("log", torch.float32, ordinary)
    assert call.args[0].shape == (3, 4)
    assert call.args[0].flatten().tolist() == [2.0, 3.0, 5.0] * 4  # tiled: log's domain
    (call,) = models.model_calls("log", torch.float64, [])
    values = call.args[0]
    assert values.dtype == torch.float64 and bool(((values >= 0.5) & (values < 1.5)).all())
    again = models.model_calls("log", torch.float64, [])[0].args[0]
    assert torch.equal(values, again)  # seeded


GOLDEN = ["embedding", "addmm", "addmm.out", "_softmax", "masked_fill_.Scalar", "index.Tensor"]
GOLDEN += ["nll_loss_forward", "max_pool2d_with_indices_backward", "_log_softmax_backward_data"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]


@pytest.mark.parametrize("overload", GOLDEN)
def test_golden_calls_run_on_cpu(overload):
    if workloads.nearest_calls_path() is None:
        pytest.skip(f"no calls file for torch {torch.__version__}")
    assert models.has_model_calls(overload)
    found = 0
    for dtype in DTYPES:
        calls = models.model_calls(overload, dtype, [])
        assert len(calls) <= models.MAX_MODEL_CALLS
        assert len({c.signature() for c in calls}) == len(calls)
        for call in calls:
            floats = [t for t in call.tensors() if t.is_floating_point()]
            if dtype.is_floating_point:
                assert all(t.dtype == dtype for t in floats), call.signature()
            resolve(overload)(*call.args, **call.kwargs)
        found += len(calls)
    assert found


def test_golden_index_tensors_keep_their_recorded_values():
    if workloads.nearest_calls_path() is None:
        pytest.skip(f"no calls file for torch {torch.__version__}")
    for overload in ("embedding", "index_select", "nll_loss_forward"):
        recorded = models._recorded()[overload]
        calls = models.model_calls(overload, torch.float16, [])
        assert len(calls) == len(recorded)
        for call, encoded in zip(calls, recorded, strict=True):
            indices = [t for t in call.tensors() if t.dtype == torch.int64]
            expected = [
                a["values"] for a in encoded["args"] if isinstance(a, dict) and "values" in a
            ]
            assert [t.flatten().tolist() for t in indices] == expected
    # the tiny Qwen2's prompt, as generate() embeds it
    ids = [c.args[1].tolist() for c in models.model_calls("embedding", torch.float32, [])]
    assert [[0, 0, 7, 21, 9, 30], [11, 3, 60, 25, 14, 50]] in ids


def test_no_calls_file_means_no_model_calls(monkeypatch):
    monkeypatch.setattr(workloads, "nearest_calls_path", lambda: None)  # (see test_workloads.py)
    models._recorded.cache_clear()
    try:
        assert not models.has_model_calls("addmm")
        assert models.model_calls("addmm", torch.float32, []) == []
    finally:
        models._recorded.cache_clear()
