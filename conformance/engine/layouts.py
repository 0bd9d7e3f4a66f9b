"""Layouts: the same values placed in memory in different ways (strides, offsets, stride 0, ...).

A layout turns a contiguous CPU tensor into a `Placement`: a flat backing buffer plus
(size, stride, storage_offset). The same placement is materialised on CPU and on the device, so
both sides see identical memory layouts and the whole backing buffer can be compared afterwards
(a write outside the view shows up there).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from conformance.engine.layout_names import LAYOUT_HELP, parse_layouts  # noqa: F401 (re-exported)
from conformance.engine.transfer import has_storage, to_device

GAP_VALUE = 7  # fills the padding around views, so writes into the gaps are visible


@dataclass
class Placement:
    base: torch.Tensor  # 1-D, CPU
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    _whole: bool | None = field(default=None, init=False, repr=False, compare=False)
    _shaped: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def materialize(
        self, device: torch.device | str, cpu: bool | None = None, read_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(backing buffer, view) on `device` (`cpu`: whether it is the CPU, where the caller
        knows); the view aliases the buffer. On a device, a placement that is its whole buffer
        (contiguous, offset 0) is placed as it is, without `as_strided`: then buffer and view
        are the same tensor (read the buffer with `transfer.read_storage`); so on CPU for an
        argument the op only reads (`read_only`: one clone in its shape; a written one keeps a
        flat buffer, which the written checks compare)."""
        on_cpu = is_cpu(device) if cpu is None else cpu
        if on_cpu and not (read_only and self.is_whole_buffer()):
            base = self.base.clone()
        elif self.is_whole_buffer():
            view = self.shaped().clone() if on_cpu else to_device(self.shaped(), device)
            return view, view
        else:
            base = to_device(self.base, device)
            if not has_storage(base):  # a lazy device: no memory, views made by view ops
                view = self.view_of(base)
                if view is None:
                    view = to_device(self.values().contiguous(), device)
                    return view, view
                return base, view
        return base, base.as_strided(self.size, self.stride, self.offset)

    def view_of(self, base: torch.Tensor) -> torch.Tensor | None:
        """The placed view of `base` (1-D, any device) made by view ops alone (narrow, view,
        slicing, select, permute, unsqueeze, expand), as a model makes views, never
        `as_strided` (a device without storage has no memory for strides to address); None
        where the placement is no such view. Dims are nested by decreasing stride: each
        stride must be a multiple of the next (the layouts of this module all are)."""
        size, stride = self.size, self.stride
        if 0 in size:
            return None
        kept = [d for d in range(len(size)) if size[d] > 1 and stride[d] > 0]
        order = sorted(kept, key=lambda d: -stride[d])
        steps = [stride[d] for d in order]
        pairs = list(zip(steps, steps[1:], order[1:], strict=False))
        if any(a % b or a // b < size[d] for a, b, d in pairs):
            return None
        extents = [size[order[0]]] if order else []
        extents += [a // b for a, b, _ in pairs]
        inner = steps[-1] if steps else 1
        needed = (math.prod(extents) - 1) * inner + 1  # up to the last element addressed
        if self.offset + needed > base.numel():
            return None
        nested = base.narrow(0, self.offset, needed)[::inner].view(tuple(extents))
        for axis, d in enumerate(order):
            nested = nested.narrow(axis, 0, size[d])
        # back to the placement's dim order; size-1 and stride-0 dims come back by unsqueeze
        view = nested.permute(tuple(sorted(range(len(order)), key=lambda a: order[a])))
        for d in range(len(size)):
            if d not in kept:
                view = view.unsqueeze(d)
        return view.expand(*size) if any(s == 0 for s in stride) else view

    def is_whole_buffer(self) -> bool:
        """Contiguous at offset 0 over every element of the buffer (worked out once: a
        placement is never changed, and every sample placing it asks)."""
        if self._whole is None:
            self._whole = (
                self.offset == 0
                and self.base.numel() == math.prod(self.size)
                and self.stride == _contiguous_strides(self.size)
            )
        return self._whole

    def shaped(self) -> torch.Tensor:
        """The buffer in the placement's shape, for a placement that is its whole buffer
        (`is_whole_buffer`); made once, kept for every sample placing it (never written)."""
        if self._shaped is None:
            self._shaped = self.base.view(size=self.size)
        return self._shaped

    def values(self) -> torch.Tensor:
        """The placed values as a CPU tensor (a view of the backing buffer)."""
        return self.base.as_strided(self.size, self.stride, self.offset)


def is_cpu(device: torch.device | str) -> bool:
    """Whether `device` (a torch.device or its name) is the CPU, without `str(device)`'s cost
    (asked for every tensor a sample places)."""
    return device.type == "cpu" if isinstance(device, torch.device) else device == "cpu"


def _contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch gives a contiguous tensor of `size` (a dim of size 0 or 1 counts as 1),
    computed without making a tensor (placing is on every sample's path)."""
    strides = []
    step = 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _place_dense(
    buf: torch.Tensor, t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int
) -> Placement:
    """A placement over `buf`'s elements, laid out from the sample `t`: `buf` as it is where it
    was made for the placement, a copy where it is `t`'s own memory (`.contiguous()` returns a
    tensor already laid out so as it is), so no run writes the sample."""
    flat = buf.reshape(-1)
    if buf.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
        flat = flat.clone()
    return Placement(flat, size, stride, offset)


def _place_gapped(t: torch.Tensor, n: int, stride: tuple[int, ...], offset: int) -> Placement:
    """`t`'s values at (`stride`, `offset`) in a fresh buffer of `n` elements holding GAP_VALUE
    everywhere else (one fill, one copy: no view of the buffer to make first)."""
    shape = tuple(t.shape)
    buf = torch.full((n,), GAP_VALUE, dtype=t.dtype)
    buf.as_strided(shape, stride, offset).copy_(t)
    return Placement(buf, shape, stride, offset)


def contiguous(t: torch.Tensor) -> Placement:
    """The values in a buffer of their own, contiguous (one copy, whatever `t`'s strides)."""
    flat = t.clone(memory_format=torch.contiguous_format).reshape(-1)
    return Placement(flat, tuple(t.shape), _contiguous_strides(tuple(t.shape)), 0)


def noncontiguous(t: torch.Tensor) -> Placement | None:
    """Like make_tensor(noncontiguous=True): last dim doubled, view [..., 1::2]."""
    if t.dim() == 0 or t.numel() == 0:
        return None
    shape = tuple(t.shape)
    stride = list(_contiguous_strides((*shape[:-1], 2 * shape[-1])))
    stride[-1] = 2
    return _place_gapped(t, 2 * t.numel(), tuple(stride), 1)


def transposed(t: torch.Tensor) -> Placement | None:
    """The last two dims swapped in memory (column-major for matrices)."""
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return None
    buf = t.transpose(-1, -2).contiguous()  # t itself where t was transposed already
    view = buf.transpose(-1, -2)
    return _place_dense(buf, t, tuple(view.shape), view.stride(), 0)


def sliced(t: torch.Tensor) -> Placement | None:
    """Every other row of a buffer twice as long in dim 0 (slice with step 2)."""
    if t.dim() == 0 or t.shape[0] < 2:
        return None
    shape = tuple(t.shape)
    stride = list(_contiguous_strides((2 * shape[0], *shape[1:])))
    stride[0] *= 2
    return _place_gapped(t, 2 * t.numel(), tuple(stride), 0)


def offset(t: torch.Tensor) -> Placement | None:
    """Contiguous, but starting 3 elements into a padded buffer."""
    if t.numel() == 0:
        return None
    return _place_gapped(t, t.numel() + 5, _contiguous_strides(tuple(t.shape)), 3)


def expanded(t: torch.Tensor) -> Placement | None:
    """Stride 0 along the first dim of size > 1 (values repeat that dim's first slice)."""
    dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    if not dims:
        return None
    d = dims[0]
    row = t.narrow(d, 0, 1).contiguous()
    stride = list(_contiguous_strides(tuple(row.shape)))
    stride[d] = 0
    return Placement(row.reshape(-1).clone(), tuple(t.shape), tuple(stride), 0)


def channels_last(t: torch.Tensor) -> Placement | None:
    if t.dim() == 4:
        fmt = torch.channels_last
    elif t.dim() == 5:
        fmt = torch.channels_last_3d
    else:
        return None
    if t.shape[1] < 2:
        return None
    view = t.contiguous(memory_format=fmt)
    perm = (0, 2, 3, 1) if t.dim() == 4 else (0, 2, 3, 4, 1)
    buf = view.permute(perm).contiguous()  # t itself where t was channels_last already
    return _place_dense(buf, t, tuple(view.shape), view.stride(), 0)


def zero_size(t: torch.Tensor) -> Placement | None:
    """Dim 0 narrowed to 0 elements (shape-changing; see `shrink_dims`)."""
    if t.dim() == 0 or t.shape[0] == 0:
        return None
    return contiguous(t.narrow(0, 0, 0))


def zero_dim(t: torch.Tensor) -> Placement | None:
    """The first element as a 0-dim tensor (shape-changing)."""
    if t.dim() == 0 or t.numel() == 0:
        return None
    return Placement(t.reshape(-1).narrow(0, 0, 1).clone(), (), (), 0)


#: the layouts that change a shape, not a memory layout
SHAPE_LAYOUTS = ("contiguous", "zero_size", "zero_dim")
#: what a device without observable storage is placed in: the shape layouts and a view made by
#: view ops (`Placement.view_of`: transposed is `.transpose(-1, -2)` of a buffer laid out for
#: it), as a model makes one; its other layouts are views by the same ops on another buffer
STORAGELESS_LAYOUTS = (*SHAPE_LAYOUTS, "transposed")

LAYOUTS: dict[str, Callable[[torch.Tensor], Placement | None]] = {
    "contiguous": contiguous,
    "noncontiguous": noncontiguous,
    "transposed": transposed,
    "sliced": sliced,
    "offset": offset,
    "expanded": expanded,
    "channels_last": channels_last,
    "zero_size": zero_size,
    "zero_dim": zero_dim,
}

# Layouts whose placement holds the tensor's own values (moved in memory, not changed): CPU's
# run on contiguous copies of a sample is the same for all of them (consistency.layout_free runs
# it once). A new layout joins only if its `values()` equal the tensor's (tests/engine check it).
KEEPS_VALUES = {"contiguous", "noncontiguous", "transposed", "sliced", "offset", "channels_last"}
# Layouts that change shapes, and so only make sense applied to the largest inputs together.
SHAPE_CHANGING = {"zero_size", "zero_dim"}
# Layouts never applied to tensors the op writes (in-place self, out=): stride 0 is read-only.
READ_ONLY = {"expanded"}

# Every layout has a name and a help line (layout_names.py, importable without torch).
assert set(LAYOUTS) == set(LAYOUT_HELP), set(LAYOUTS) ^ set(LAYOUT_HELP)
