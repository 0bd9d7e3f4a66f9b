"""The -sync cases of a lazy device: a result read back at every kind of sync point.

A lazy device runs its graph at a sync point, and its bugs live there (seed 004: a save that
synced a subset donated a buffer a pending graph still needed). One sample of a -sync case runs
the op once on the device and reads every result (outputs and written arguments) back:

1. after the runtime's own sync (`torch_xla.sync()`, `torch._lazy.mark_step()`); values that
   differ already here are the forward case's finding (one root cause), not a sync point's;
2. the call run again, and the first result saved alone while the call's other tensors are
   still pending (seed 004; with the runtime's save: `xm.save`, or for torch._lazy a save of
   the values moved to CPU, as `xm.save` does), followed by a step: every tensor of the call,
   its arguments included, reads back equal to CPU's, and the saved file loads back equal;
3. through `.item()` of a reduction: the device's float64 sum of each result equals the sum of
   its values read back;
4. after running the same call a second time, which must compile nothing (a recompilation is
   named; the runtime's counters give the graphs compiled and executed);
5. through a `torch.save` / `torch.load` round trip of the device tensors themselves (last: a
   runtime that cannot serialise its tensors, as torch._lazy, fails here and nowhere earlier);

and each must agree with CPU.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from conformance.engine.checks import Mismatch, NotApplicable, invoke, returned
from conformance.engine.compare import ErrorStats, Scale, compare_values
from conformance.engine.lazy import COMPILES, EXECUTIONS, LazyRuntime
from conformance.engine.placing import Materialized, PlacedCall
from conformance.engine.transfer import read_back

MAX_SYNC_SAMPLES = 4  # each sample compiles several graphs (sum, save, the second run)
SYNC_POINTS = (
    "sync",
    "save of a subset, then a step",
    ".item()",
    "a second run (no recompilation)",
    "torch.save/torch.load",
)


@dataclass
class SyncEvidence:
    """What the runtime counted over a case's -sync samples (the record keeps it)."""

    compiles: int = 0
    executions: int = 0
    samples: int = 0

    def as_record(self) -> dict[str, Any]:
        return {"compiles": self.compiles, "executions": self.executions}


def run_sync_sample(
    runtime: LazyRuntime,
    op: Any,
    placed: PlacedCall,
    device: torch.device | str,
    scale: Scale,
    stats: ErrorStats,
    evidence: SyncEvidence,
    on_device: Callable[[], AbstractContextManager] = nullcontext,
) -> None:
    """Run one sample and read its results back at every sync point. Raises Mismatch or
    NotApplicable (a call that raises is the forward case's to judge)."""
    cpu = placed.materialize("cpu")
    expected = invoke(op, cpu)
    if expected.exc is not None:
        raise NotApplicable("cpu raised: error parity is judged by the forward case")
    start = runtime.counts()
    dev, actual, _ = _call(runtime, op, placed, device, on_device)
    pairs = list(_results(op, actual, expected.result, dev, cpu))
    if not any(name.startswith("output") or written for name, _, _, written in pairs):
        raise NotApplicable("no tensor result to read back")
    _at("sync", runtime.sync)
    try:
        _compare_all("after sync()", pairs, scale, stats)
    except Mismatch as m:  # wrong whatever the sync point: one root cause, the forward case's
        raise NotApplicable(f"values differ from cpu after a plain sync ({m.message})") from None
    first = runtime.counts()
    evidence.compiles += first.moved(start, COMPILES) or 0
    evidence.executions += first.moved(start, EXECUTIONS) or 0
    # seed 004's point: a subset saved while the call's other tensors are still pending, among
    # them a pending read of each argument the call writes (its value before the call)
    dev, actual, before = _call(runtime, op, placed, device, on_device, witnesses=True)
    pairs = list(_results(op, actual, expected.result, dev, cpu)) + before
    _subset_save(runtime, pairs, scale, stats)
    _items(pairs)
    first = runtime.counts()
    _call(runtime, op, placed, device, on_device)
    _at("sync of the same call run again", runtime.sync)
    recompiled = runtime.counts().moved(first, COMPILES) or 0
    if recompiled:
        raise Mismatch(
            "recompile",
            f"running the same call again (same shapes, dtypes and placement) compiled "
            f"{recompiled} more graph(s): the runtime's graph cache missed ({COMPILES})",
        )
    _round_trip(pairs, scale, stats)  # last: a runtime torch.save cannot serialise stops here
    evidence.samples += 1


def _call(
    runtime: LazyRuntime,
    op: Any,
    placed: PlacedCall,
    device: torch.device | str,
    on_device: Callable[[], AbstractContextManager],
    witnesses: bool = False,
) -> tuple[Materialized, Any, list[tuple[str, torch.Tensor, torch.Tensor, bool]]]:
    """Place and call; with `witnesses`, first a pending copy (clone) of every argument the
    call writes: it must read back as the value placed, whatever the step donates."""
    dev = placed.materialize(device)
    before = []
    if witnesses:
        for leaf, _, view in dev.bases:
            if leaf.written and view.numel() and not leaf.on_cpu:
                name = f"{leaf.arg} as it was before the call (a pending clone)"
                before.append((name, view.clone(), leaf.placement.values(), False))
    with on_device():
        actual = invoke(op, dev)
    if actual.exc is not None:
        raise NotApplicable("the device raised: the forward case judges it")
    return dev, actual.result, before


def _results(
    op: Any, actual: Any, expected: Any, dev: Materialized, cpu: Materialized
) -> Iterator[tuple[str, torch.Tensor, torch.Tensor, bool]]:
    """(name, device tensor, CPU tensor, written): every live tensor of the call, returned
    tensors first, then every argument (written or only read: after a step each must still be
    readable, and a donated input buffer would not be)."""
    got = {i: t for i, t, _ in returned(op._schema, actual)}
    for i, e, _ in returned(op._schema, expected):
        a = got.get(i)
        if isinstance(a, torch.Tensor) and a.layout == torch.strided and a.numel():
            yield f"output {i}", a, e, False
    for (leaf, _, view), (_, _, cview) in zip(dev.bases, cpu.bases, strict=True):
        if view.numel() and not leaf.on_cpu:
            yield leaf.arg, view, cview, leaf.written


def _at(point: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the device failed at its sync point
        text = (str(exc).strip().splitlines() or [""])[0][:200]
        raise Mismatch("sync", f"{point}: the device raised {type(exc).__name__}: {text}") from None


def _compare_all(
    point: str,
    pairs: list[tuple[str, torch.Tensor, torch.Tensor, bool]],
    scale: Scale,
    stats: ErrorStats,
    read: Callable[[torch.Tensor], torch.Tensor] = read_back,
) -> None:
    for name, a, e, _ in pairs:
        got = _at(f"{point}: reading {name}", lambda a=a: read(a))
        try:
            compare_values(name, got, e, scale, stats)
        except Mismatch as m:
            raise Mismatch("sync", f"{point}: {m.message}", m.max_abs, m.max_rel) from None


def _subset_save(
    runtime: LazyRuntime,
    pairs: list[tuple[str, torch.Tensor, torch.Tensor, bool]],
    scale: Scale,
    stats: ErrorStats,
) -> None:
    """Save the first result alone while the call's other tensors are pending, step, then read
    every tensor of the call and the saved file back (seed 004)."""
    name, first, expected, _ = pairs[0]
    saver, how = runtime.save, runtime.save_name
    fd, path = tempfile.mkstemp(suffix=".pt")
    os.close(fd)
    try:
        _at(f"{how} of {name} alone", lambda: saver([first], path))
        _at(f"the step after {how} of {name} alone", runtime.sync)
        _compare_all(f"after {how} of {name} alone, then a step", pairs, scale, stats)
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        compare_values(f"{name} as {how} wrote it", loaded[0].to("cpu"), expected, scale, stats)
    finally:
        os.unlink(path)


def _round_trip(
    pairs: list[tuple[str, torch.Tensor, torch.Tensor, bool]], scale: Scale, stats: ErrorStats
) -> None:
    buffer = io.BytesIO()
    _at("torch.save of the device results", lambda: torch.save([p[1] for p in pairs], buffer))
    buffer.seek(0)
    loaded = _at("torch.load of the device results", lambda: torch.load(buffer, weights_only=True))
    renamed = [(n, t, e, w) for (n, _, e, w), t in zip(pairs, loaded, strict=True)]
    _compare_all("after a torch.save/torch.load round trip", renamed, scale, stats)


def _items(pairs: list[tuple[str, torch.Tensor, torch.Tensor, bool]]) -> None:
    """`.item()` of a float64 sum on the device equals the sum of the values read back."""
    for name, a, _, _ in pairs:
        if a.is_complex() or not (a.is_floating_point() or a.dtype in _INTEGRAL):
            continue
        got = _at(f".item() of {name}.double().sum()", lambda a=a: a.double().sum().item())
        host = read_back(a).double()
        want = host.sum().item()
        limit = 1e-9 * float(host.abs().sum()) + 1e-12
        if not (math.isnan(got) and math.isnan(want)) and not abs(got - want) <= limit:
            if not (math.isinf(got) and got == want):
                raise Mismatch(
                    "sync",
                    f".item() of {name}.double().sum() is {got!r}, the sum of {name}'s values "
                    f"read back is {want!r}",
                )


_INTEGRAL = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)
