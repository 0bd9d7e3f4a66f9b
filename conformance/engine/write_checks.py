"""The checks of what an op writes and where its views point, registered with checks.py's:
written arguments (in place, version bumped, values and the memory around them as CPU's),
inputs the op only reads (bit for bit unchanged), a returned view's map onto its input (by
storage offset and strides), and on a device without observable storage a write through a
returned view (by value)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from conformance.engine import oracles
from conformance.engine.checks import Sample, redrawn, returned, sample_check, version
from conformance.engine.compare import (
    ErrorStats,
    Mismatch,
    compare_values,
    equal_values,
    errors,
    same_values,
)
from conformance.engine.errorclass import first_line
from conformance.engine.precision import compare_result
from conformance.engine.schema_facts import declared_writes, returns_views
from conformance.engine.spec import OpSpec
from conformance.engine.transfer import read_back, read_storage


@sample_check(
    "written",
    "written arguments stay in place, bump their version and equal CPU's; the memory around "
    "them is untouched and contents that existed before a resize are kept",
)
def check_written(s: Sample) -> None:
    """Written args: memory kept (as on CPU), version bumped, values and whole buffer as CPU's."""
    dev, cpu, spec, stats = s.dev, s.cpu, s.spec, s.stats
    dev_written = [(leaf, base, view) for leaf, base, view in dev.bases if leaf.written]
    if not dev_written:
        return
    before, cpu_before = s.written_before, s.cpu_written_before
    declared = declared_writes(s.schema)
    cpu_written = [(leaf, base, view) for leaf, base, view in cpu.bases if leaf.written]
    names = [name for name, _ in dev.written()]
    for j, ((leaf, base, view), (_, cbase, cview), (ver, ptr), (cver, cptr), name) in enumerate(
        zip(dev_written, cpu_written, before, cpu_before, names, strict=True)
    ):
        if s.backend.profile.storage.value and view.data_ptr() != ptr and cview.data_ptr() == cptr:
            raise Mismatch(
                "inplace", f"{leaf.arg} moved to new memory (data_ptr changed; cpu writes in place)"
            )
        bumped, cpu_bumped = version(view) > ver, version(cview) > cver
        if s.layout_free_bumps is not None and name not in s.layout_free_bumps:
            cpu_bumped = False  # CPU bumps it on this layout only: its kernel's artefact
        if leaf.arg in declared and cpu_bumped and not bumped:
            raise Mismatch("inplace", f"version counter of {leaf.arg} not bumped by the write")
        if view.shape != cview.shape:
            raise Mismatch(
                "out",
                f"{leaf.arg}: shape {list(view.shape)} after the call, cpu "
                f"{list(cview.shape)} (resize)",
            )
        if spec.keeps_old_contents and s.backend.profile.storage.value:
            _compare_old_contents(leaf.arg, view, cbase, spec, s.overload)
        if spec.check_values and s.nondeterministic:
            more = redrawn(s, lambda r, j=j: r.written[j])
            oracles.compare_random(leaf.arg, read_back(view), cview, spec.tol_scale, stats, more)
        elif spec.check_values:
            compare_result(
                s, leaf.arg, view, cview, device_type=view.device.type, check_strides=False,
                check_values=True,
            )  # fmt: skip
        if cview.untyped_storage()._cdata != cbase.untyped_storage()._cdata:
            continue  # CPU pointed it at other memory (set_): the view's values were compared
        # the view's values, judged above by every rule of compare_result (a device as close
        # to float64 as CPU passes there): the buffer must hold them where CPU's view points
        judged = s.host(view) if spec.check_values and not s.nondeterministic else None
        if s.backend.profile.storage.value:
            _compare_buffer(leaf.arg, read_storage(view), cbase, cview, spec, judged)
        elif tuple(cview.shape) == tuple(leaf.placement.size):
            # no memory to observe: the buffer it was placed in, by value (write-through); an
            # out= that cpu resized has no memory around it on a device without storage
            _compare_buffer(leaf.arg, read_back(base).reshape(-1), cbase, cview, spec, judged)


def _compare_old_contents(
    arg: str, view: torch.Tensor, cbase: torch.Tensor, spec: OpSpec, overload: str
) -> None:
    """resize_ and the like: every element that existed before the call keeps its value."""
    old = cbase.numel()
    now = read_storage(view)[:old]
    if now.numel() < old:
        raise Mismatch(
            "values",
            f"{arg}: {overload} left a storage of {now.numel()} elements, the old one had {old}",
        )
    # kept contents are copied, never computed: bit for bit (issue 79: an old element 1 ulp
    # off, a NaN kept as 0, a subnormal flushed passed the tolerance)
    a, e = now.detach().cpu(), cbase.detach().cpu()
    kept = same_values(a, e) & (a.signbit() == e.signbit()) if a.is_floating_point() else a == e
    if not bool(kept.all()):
        first = int((~kept).reshape(-1).nonzero()[0, 0])
        raise Mismatch(
            "values",
            f"{overload} lost the old contents of {arg}: {int((~kept).sum())} of {old} elements "
            f"changed (kept contents are copies, bit for bit); first at storage element {first}: "
            f"{a.reshape(-1)[first].item()!r}, was {e.reshape(-1)[first].item()!r}",
        )


def element_offsets(t: torch.Tensor) -> torch.Tensor:
    """The storage index of every element of `t` (storage offset + strides), from metadata."""
    if t.numel() == 0:
        return torch.empty(tuple(t.shape), dtype=torch.int64)
    # one strided view of the storage's indices (a strided tensor's strides are never negative)
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return torch.arange(last + 1, dtype=torch.int64).as_strided(
        tuple(t.shape), t.stride(), t.storage_offset()
    )


def _compare_buffer(
    arg: str,
    storage: torch.Tensor,
    cbase: torch.Tensor,
    cview: torch.Tensor,
    spec: OpSpec,
    judged: torch.Tensor | None,
) -> None:
    """The backing buffer of a written argument equals CPU's: outside the view always (nothing
    may be written there); inside it, where values are compared, it holds the view's values as
    judged (`judged`: the device's view read back, which compare_result judged by every rule)
    at the places CPU's view points to (the device wrote them where it says it did).
    `storage`: the device's buffer read back, 1-D."""
    actual = storage[: cbase.numel()]
    if actual.shape != cbase.shape:
        return  # storage was replaced by a smaller one (out= resize): the view check covers it
    expected = cbase
    start, n = cview.storage_offset(), cview.numel()
    if n:
        if cview.is_contiguous() and start + n <= cbase.numel():
            # the view is the run [start, start + n) of the buffer, in order: a slice selects
            # what its offsets would (an index_put of a million offsets was the costliest part
            # of a -special case of a float16 binary op)
            where: slice | torch.Tensor = slice(start, start + n)
            held: slice | torch.Tensor = slice(None)
        else:
            inside = element_offsets(cview).reshape(-1)
            held = inside < cbase.numel()
            where = inside[held]
        if judged is not None and judged.shape == cview.shape:
            expected = cbase.clone()
            expected[where] = judged.reshape(-1)[held].to(cbase.dtype)
        else:
            keep = torch.ones(cbase.numel(), dtype=torch.bool)
            keep[where] = False
            actual, expected = actual[keep], cbase[keep]
    try:
        compare_values(f"{arg} buffer", actual, expected, spec.tol_scale, ErrorStats())
    except Mismatch as m:
        raise Mismatch(
            "inputs",
            f"memory of {arg} outside/around the view differs from cpu "
            f"after the write: {m.message}",
        ) from None


@sample_check("inputs", "arguments the op only reads are left bit-for-bit unchanged")
def check_inputs_untouched(s: Sample) -> None:
    dev = s.dev
    for leaf, base, _ in dev.bases:
        if leaf.written:
            continue
        now = read_storage(base, flat=False)  # a whole-buffer input in its shape: no view
        placement, pristine = leaf.placement, leaf.placement.base
        if now.dim() != 1:  # its whole storage, as placed (else flat, as any storage)
            if tuple(now.shape) == placement.size and placement.is_whole_buffer():
                pristine = placement.shaped()
            else:
                now = now.reshape(-1)
        if now.shape == pristine.shape and not equal_values(now, pristine):
            _, _, nbad, first = errors(now.reshape(-1), pristine.reshape(-1))
            raise Mismatch(
                "inputs",
                f"input '{leaf.arg}' was modified ({nbad} elements of its "
                f"buffer changed, first at flat index {first})",
            )


@sample_check(
    "view",
    "a returned view maps onto the same elements of its input as on CPU (storage offset and "
    "strides, compared on metadata: a write through it would land where it lands on CPU)",
    needs=("storage",),
)
def check_view_map(s: Sample) -> None:
    if not s.spec.check_aliasing or not returns_views(s.schema):
        return
    dev_out = list(returned(s.schema, s.actual.result))
    cpu_out = {i: t for i, t, _ in returned(s.schema, s.expected.result)}
    for i, t, info in dev_out:
        if info is None or info.is_write or not t.numel() or i not in cpu_out:
            continue
        e = cpu_out[i]
        if t.shape != e.shape:
            continue  # the outputs check reports it
        got, want = _byte_offsets(t), _byte_offsets(e)
        if not torch.equal(got, want):
            bad = int((got != want).reshape(-1).nonzero()[0, 0])
            raise Mismatch(
                "view",
                f"output {i} does not map onto the elements of its input that it maps onto "
                f"on cpu: element {bad} is at byte {int(got.reshape(-1)[bad])} of the storage, "
                f"on cpu at byte {int(want.reshape(-1)[bad])} (device strides {t.stride()}, "
                f"offset {t.storage_offset()}; cpu {e.stride()}, {e.storage_offset()})",
            )


def _byte_offsets(t: torch.Tensor) -> torch.Tensor:
    start = t.data_ptr() - t.untyped_storage().data_ptr() - t.storage_offset() * t.element_size()
    return start + element_offsets(t) * t.element_size()


@sample_check(
    "write-through",
    "on a device without observable storage (a lazy device's): a value written into a "
    "returned view reaches the view's input, element for element as on cpu",
    needs=("no storage",),
)
def check_write_through(s: Sample) -> None:
    if not s.spec.check_aliasing or not s.spec.check_values:
        return
    if s.spec.reference is not None:
        return  # cpu runs another function: its result need not be a view
    views = [i for i, _, info in returned(s.schema, s.actual.result) if _is_view(info)]
    if not views:
        return
    dev, cpu = s.placed.materialize(s.backend.device), s.placed.materialize("cpu")
    with s.backend.routed_through_fallback(s.route), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = dict((i, t) for i, t, _ in returned(s.schema, s.op(*dev.args, **dev.kwargs)))
    want = dict((i, t) for i, t, _ in returned(s.schema, s.op(*cpu.args, **cpu.kwargs)))
    for i in views:
        if i not in want or not want[i].numel() or got[i].shape != want[i].shape:
            continue  # the outputs check reports a shape that differs
        where = element_offsets(want[i]).reshape(-1)
        if where.unique().numel() != where.numel():
            continue  # elements that share memory (expand, as_strided): what lands is undefined
        marker = _marker(want[i])
        want[i].copy_(marker)
        try:
            got[i].copy_(marker)
        except Exception as exc:  # noqa: BLE001 - the device's own error: its finding
            raise Mismatch(
                "view",
                f"output {i} (a view): writing into it raised {type(exc).__name__}: "
                f"{first_line(exc)}; cpu writes into its view",
            ) from None
        for (leaf, base, _), (_, cbase, _) in zip(dev.bases, cpu.bases, strict=True):
            now = read_back(base).reshape(-1)
            cbase = cbase.reshape(-1)  # a whole-buffer input is its own buffer, in its shape
            if now.shape == cbase.shape and not equal_values(now, cbase):
                _, _, nbad, first = errors(now, cbase)
                raise Mismatch(
                    "view",
                    f"output {i} (a view of '{leaf.arg}'): values written into it reach "
                    f"'{leaf.arg}' differently from cpu ({nbad} elements of its buffer differ, "
                    f"first at flat index {first}): the view does not map onto the elements "
                    "it maps onto on cpu",
                )


def _is_view(info: Any) -> bool:
    return info is not None and not info.is_write


def _marker(like: torch.Tensor) -> torch.Tensor:
    """Values unlike anything placed (placements hold small values): 100 to 149 in the view's
    shape and dtype (alternating for bool)."""
    n = like.numel()
    if like.dtype == torch.bool:
        values = torch.arange(n) % 2 == 0
    else:
        values = (torch.arange(n, dtype=torch.float64) % 50 + 100).to(like.dtype)
    return values.reshape(like.shape)
