"""CPU against itself: the reference on contiguous copies of the same values.

For a sample placed in a non-contiguous layout CPU also runs on fresh contiguous copies of the
same values (an out= argument becomes a fresh contiguous tensor). If the two results differ
beyond 10x the op's tolerance for the dtype (compare.tolerance; kernels for other layouts may
round differently), CPU disagrees with itself: the sample is a `torch-bug`, and the device is
judged against the layout-free result (`adopt` makes a CPU run hold it). Overloads with explicit
strides read memory by definition and are not checked. The written arguments whose version
counter CPU bumps on contiguous copies too tell which bumps are the op's contract and which are
its kernel's artefact. For a call that writes no argument, the contiguous case's own CPU run
(a copy of its results) is that run: `keep_contiguous_run`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_unflatten

from conformance.engine import layouts
from conformance.engine.checks import Outcome, invoke
from conformance.engine.compare import ErrorStats, Mismatch, compare_values
from conformance.engine.placing import Materialized, PlacedCall
from conformance.engine.spec import OpSpec

SELF_TOLERANCE = 10.0  # x the op's tolerance for the dtype (compare.tolerance), CPU against CPU


@dataclass
class LayoutFree:
    """CPU's run on contiguous copies: its arguments, outcome, and the written arguments whose
    version counter moved."""

    mat: Materialized
    outcome: Outcome
    bumped: frozenset[str]


@functools.cache
def reads_memory(op: torch._ops.OpOverload) -> bool:
    """Whether the overload takes explicit strides (as_strided, _reshape_alias, set_, ...): its
    result depends on the memory layout of its input by definition, not by a CPU bug (asked
    of every sample: kept per overload)."""
    names = {a.name for a in op._schema.arguments}
    return {"size", "stride"} <= names or "storage_offset" in names or "source" in names


def layout_free(
    op: torch._ops.OpOverload, spec: OpSpec, placed: PlacedCall, reference, expected: Outcome
) -> LayoutFree | None:
    """CPU on contiguous copies of the sample's values (None where that says nothing), kept on
    the call: run once for every case of the sample whose copies are the same (the paths and
    modes of a layout; every layout that keeps the values, `layouts.KEEPS_VALUES`). Its tensors
    are only read afterwards (the checks compare against them, `adopt` copies them)."""
    if not _wanted(op, spec, expected):
        return None
    shared = placed.call.layout_free
    key = (op, reference, None if placed.layout in layouts.KEEPS_VALUES else placed.layout)
    if key not in shared:
        free = placed.layout_free()
        before = {id(view): view._version for _, view in free.written()}
        out = invoke(reference, free)
        bumped = frozenset(n for n, view in free.written() if view._version > before[id(view)])
        shared[key] = LayoutFree(free, out, bumped)
    return shared[key]


def keep_contiguous_run(
    op: torch._ops.OpOverload,
    spec: OpSpec,
    placed: PlacedCall,
    reference,
    cpu: Materialized,
    expected: Outcome,
) -> None:
    """Keep the contiguous layout's own CPU run (`cpu`, `expected`: the plain forward call,
    deterministic) as the layout-free run of the layouts that keep the values: its arguments
    are fresh contiguous copies of the same values, so those layouts need not run CPU again.
    Only for a call that writes no argument (an out= of that layout may be placed empty and
    resized, which contiguous copies are not) and only where none was kept yet. The results
    are kept as copies: the case's own checks may still change its reference in place
    (unvectorised.py replaces a vectorised kernel's NaNs), a layout-free run's never."""
    if not _wanted(op, spec, expected) or not placed.contiguous():
        return
    if any(leaf.written for leaf, _, _ in cpu.bases):
        return
    key = (op, reference, None)
    if key not in placed.call.layout_free:
        leaves, tree = expected.flat()
        copies = [t.clone() if isinstance(t, torch.Tensor) else t for t in leaves]
        kept = Outcome(tree_unflatten(copies, tree))
        placed.call.layout_free[key] = LayoutFree(cpu, kept, frozenset())


def _wanted(op: torch._ops.OpOverload, spec: OpSpec, expected: Outcome) -> bool:
    """Whether CPU's run on contiguous copies can say anything of this sample."""
    return (
        spec.layout_free_reference
        and spec.check_values
        and not reads_memory(op)
        and expected.exc is None
    )


def _pairs(
    spec: OpSpec, strided: Materialized, expected: Outcome, free: LayoutFree
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, strided-layout CPU tensor, layout-free CPU tensor) for every compared value."""
    out = []
    e_leaves, e_spec = expected.flat()
    f_leaves, f_spec = free.outcome.flat()
    if e_spec == f_spec:
        for i, (e, f) in enumerate(zip(e_leaves, f_leaves, strict=True)):
            if (
                isinstance(e, torch.Tensor)
                and isinstance(f, torch.Tensor)
                and i not in spec.metadata_only_outputs
            ):
                out.append((f"output {i}", e, f))
    for (name, view), (_, fview) in zip(strided.written(), free.mat.written(), strict=True):
        out.append((name, view, fview))
    return out


def disagreement(
    spec: OpSpec, cpu: Materialized, expected: Outcome, free: LayoutFree
) -> str | None:
    """How CPU on the placed layout disagrees with CPU on contiguous copies, or None."""
    if free.outcome.exc is not None:
        return None  # raising on one layout only: the error check judges the device
    for name, e, f in _pairs(spec, cpu, expected, free):
        if e.shape != f.shape or e.dtype != f.dtype:
            continue
        try:  # equal values, or the same bits, return at once (compare_values' own first tests)
            compare_values(
                name, _plain(e), _plain(f), spec.tol_scale, ErrorStats(), widen=SELF_TOLERANCE
            )
        except Mismatch as m:
            detail = m.message.replace("device", "this layout").replace("cpu", "contiguous")
            return f"cpu disagrees with itself: {detail}"
    return None


def _plain(t: torch.Tensor) -> torch.Tensor:
    """`t` without its graph, detached only where it has one (a detach is a dispatched op)."""
    return t.detach() if t.requires_grad else t


def adopt(fixed: Materialized, expected: Outcome, free: LayoutFree) -> None:
    """Make `fixed` (a CPU run on the placed layout) hold the layout-free values: the written
    buffers are reset to their pristine contents plus the layout-free values in the view."""
    with torch.no_grad():
        for (leaf, base, view), (_, _, fview) in zip(fixed.bases, free.mat.bases, strict=True):
            if leaf.written and view.shape == fview.shape:
                base.copy_(leaf.placement.base)
                view.copy_(fview)
        e_leaves, e_spec = expected.flat()
        f_leaves, f_spec = free.outcome.flat()
        if e_spec != f_spec:
            return
        written = [view for leaf, _, view in fixed.bases if leaf.written]
        for e, f in zip(e_leaves, f_leaves, strict=True):
            if (
                isinstance(e, torch.Tensor)
                and isinstance(f, torch.Tensor)
                and e.shape == f.shape
                and not any(e is w for w in written)
                and e._base is None
            ):
                e.copy_(f)
