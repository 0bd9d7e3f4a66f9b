"""The -sync sample runner (engine/syncing.py) against a fake lazy runtime on CPU: every sync
point is reached, a recompilation of the same call is named, an error at a sync point is the
device's and names the point."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.calls import Call
from conformance.engine.compare import ErrorStats, Mismatch
from conformance.engine.discovery import resolve
from conformance.engine.lazy import COMPILES, LazyRuntime
from conformance.engine.placing import place
from conformance.engine.syncing import SyncEvidence, run_sync_sample


class FakeMetrics:
    """The counters of a lazy runtime; `compile_on_sync` adds a compilation at every sync."""

    def __init__(self, compile_on_sync: bool) -> None:
        self.counters = {COMPILES: 0}
        self.compile_on_sync = compile_on_sync
        self.syncs = 0

    def counter_names(self) -> list[str]:
        return list(self.counters)

    def counter_value(self, name: str) -> int:
        return self.counters[name]


def _runtime(compile_on_sync: bool = False, fail_at: int | None = None) -> LazyRuntime:
    metrics = FakeMetrics(compile_on_sync)

    def sync() -> None:
        metrics.syncs += 1
        if metrics.syncs == fail_at:
            raise RuntimeError("Check failed: !buffer->IsDeleted(): buffer f32[3] is deleted")
        metrics.counters[COMPILES] += compile_on_sync or metrics.syncs == 1

    return LazyRuntime("fake", sync, metrics, torch.save, "torch.save")


def _run(runtime: LazyRuntime) -> SyncEvidence:
    op = resolve("add.Tensor")
    placed = place(Call("add.Tensor", (torch.ones(3), torch.arange(3.0))), "contiguous", op._schema)
    evidence = SyncEvidence()
    run_sync_sample(runtime, op, placed, "cpu", 1.0, ErrorStats(), evidence)
    return evidence


def test_a_cached_graph_passes_every_sync_point_and_counts_its_compilation():
    evidence = _run(_runtime())
    assert (evidence.samples, evidence.compiles) == (1, 1)


def test_compiling_the_same_call_again_is_named():
    with pytest.raises(Mismatch) as info:
        _run(_runtime(compile_on_sync=True))
    assert info.value.check == "recompile"
    assert "running the same call again" in info.value.message


def test_an_error_at_a_sync_point_names_the_point_and_the_lost_buffer():
    with pytest.raises(Mismatch) as info:
        _run(_runtime(fail_at=2))  # the step after the save of a subset
    assert info.value.check == "sync"
    assert info.value.message.startswith("the step after torch.save of output 0 alone")
    assert "is deleted" in info.value.message
