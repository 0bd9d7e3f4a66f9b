"""The foundation probes: checks of the device ops the harness itself and cpu_fallback are
built on, one small tensor per layout, for a dtype.

Placing inputs and reading results needs allocation, `as_strided` and contiguous copies
(`transfer.py`); cpu_fallback and most kernels also need `_copy_from` in all three directions
with offsets, strides, dtype conversion and broadcast, `fill_`/`zero_` and `resize_`.
`probe_specs` lists every probe of a dtype, most primitive first, in the same order in every
process (engine/probing.py runs them in a process of their own); a failed one is a `Probe`,
which engine/foundations.py blames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from conformance.engine import layouts
from conformance.engine.transfer import has_storage, read_back, read_storage, to_device, to_host
from conformance.record import missing_kernel, same_overload

PROBE_SHAPE = (2, 3, 4, 5)
OTHER_DTYPE = {torch.float64: torch.float32, torch.bool: torch.float32}


@dataclass(frozen=True)
class Probe:
    """One broken foundation: which op, for which dtype and layout, and what went wrong."""

    rank: int  # position in the probing order (smaller = more primitive)
    op: str  # the overload blamed, e.g. "_copy_from"
    dtype: str
    layout: str
    what: str  # e.g. "device->host copy of the offset view"
    message: str
    harness: bool  # the harness itself needs it (blocks every case of the dtype/layout)
    path: str = "native"
    # which use of the op failed: "d2h", "h2d", "d2d" (copies), "write" (fill_/zero_ into the
    # view), "any" (layout-free: resize_), "" (conversion, broadcast: evidence of none)
    direction: str = ""

    @property
    def case(self) -> str:
        """The case id that tests this foundation."""
        return f"{self.op}-{self.dtype}-{self.layout}-{self.path}"

    @property
    def no_kernel(self) -> bool:
        """The probe failed because the device has no kernel for the foundation itself."""
        missing = missing_kernel(self.message)
        return missing is not None and same_overload(missing, self.op)

    def describe(self) -> str:
        return f"{self.case} ({self.what}: {self.message})"

    def headline(self) -> str:
        """What a blocked case says about its blocker."""
        if self.no_kernel:
            return f"needs {self.op}, which has no kernel on this device ({self.what})"
        return f"blocked by {self.case}: {self.what}: {self.message}"


def _values(dtype: torch.dtype, shape: tuple[int, ...] = PROBE_SHAPE, sign: int = 1):
    n = 1
    for s in shape:
        n *= s
    ar = torch.arange(n, dtype=torch.int64).reshape(shape)
    if dtype == torch.bool:
        return (ar % 3 == 0) if sign > 0 else (ar % 2 == 0)
    if dtype.is_floating_point or dtype.is_complex:
        return (ar.to(torch.float64) * 0.5 * sign - 7).to(dtype)
    if dtype == torch.uint8:
        return ((ar * (1 if sign > 0 else 3)) % 200).to(dtype)
    return (ar * sign - 7).to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """None if `a` equals `b` exactly (NaN equal), else a short description."""
    if a.shape != b.shape:
        return f"shape {list(a.shape)}, expected {list(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype}, expected {b.dtype}"
    if a.numel() == 0:
        return None
    bad = a != b
    if a.is_floating_point() or a.is_complex():
        bad &= ~(a.isnan() & b.isnan())
    if not bool(bad.any()):
        return None
    first = int(bad.reshape(-1).nonzero()[0, 0])
    return (
        f"{int(bad.sum())}/{a.numel()} elements wrong, first at flat index {first}: "
        f"{a.reshape(-1)[first].item()!r} instead of {b.reshape(-1)[first].item()!r}"
    )


def _run(fn: Callable[[], str | None]) -> str | None:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a raising foundation is a broken one
        text = str(exc).strip().splitlines()
        return f"raised {type(exc).__name__}: {text[0][:160] if text else ''}"


@dataclass(frozen=True)
class ProbeSpec:
    """One probe, not run yet: `run()` gives its Probe if the foundation fails it."""

    rank: int
    op: str
    dtype: str
    layout: str
    what: str
    fn: Callable[[], str | None]
    harness: bool
    path: str
    direction: str = ""

    def failed(self, message: str) -> Probe:
        """This probe's failure with `message` (also for a crash seen from outside)."""
        return Probe(
            self.rank,
            self.op,
            self.dtype,
            self.layout,
            self.what,
            message,
            self.harness,
            self.path,
            self.direction,
        )

    def run(self) -> Probe | None:
        message = _run(self.fn)
        return self.failed(message) if message else None


class ProbedBackend(Protocol):
    """What the probes need of the backend under test (a Foundations): its device, and the
    path of an op's cases."""

    device: torch.device

    def path_of(self, op: str) -> str: ...


def probe_specs(f: ProbedBackend, dtype: torch.dtype) -> list[ProbeSpec]:
    """Every probe of `dtype`, most primitive first, in an order that is the same in every
    process (engine/probing.py runs them by index in another process)."""
    dev, name = f.device, str(dtype).removeprefix("torch.")
    values = _values(dtype)

    def probe(rank, op, layout, what, fn, harness=False, direction=""):
        return ProbeSpec(rank, op, name, layout, what, fn, harness, f.path_of(op), direction)

    def alloc() -> str | None:
        x = torch.empty((2, 3), dtype=dtype, device=dev)
        if x.device.type != dev.type or x.dtype != dtype or tuple(x.shape) != (2, 3):
            return f"gave {x.dtype}{list(x.shape)} on {x.device}"
        if not has_storage(x):
            return None  # a lazy device's: strides cannot be observed
        return None if x.stride() == (3, 1) else f"strides {x.stride()}, expected (3, 1)"

    def alloc_strided() -> str | None:
        x = torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=dev)
        if not has_storage(x):
            return None  # a lazy device's: strides cannot be observed
        return None if x.stride() == (1, 2) else f"strides {x.stride()}, expected (1, 2)"

    def roundtrip() -> str | None:
        flat = values.reshape(-1)
        return _same(read_storage(to_device(flat, dev)), flat)

    found = [
        probe(0, "empty.memory_format", "contiguous", "allocation", alloc, harness=True),
        # the harness never allocates with strides (transfer.py): a broken empty_strided blocks
        # only cases whose own evidence shows it
        probe(1, "empty_strided", "contiguous", "strided allocation", alloc_strided),
        probe(
            2,
            "_copy_from",
            "contiguous",
            "host->device->host round trip of a contiguous buffer",
            roundtrip,
            harness=True,
        ),
    ]
    placements = {}
    # a device without observable storage is placed in no memory layout (layouts.py)
    kept = layouts.LAYOUTS if has_storage(to_device(values[:1], dev)) else ("contiguous",)
    for layout, make in layouts.LAYOUTS.items():
        p = make(values)
        if p is not None and layout in kept:
            placements[layout] = p
    for layout, p in placements.items():
        # the harness places every layout but the contiguous one with as_strided
        harness = layout != "contiguous"
        found.append(
            probe(3, "as_strided", layout, f"a {layout} view", _as_strided(p, dev), harness)
        )
    for layout, p in placements.items():
        writable = layout not in layouts.READ_ONLY
        found.append(
            probe(
                4,
                "_copy_from",
                layout,
                f"device->host copy of the {layout} view",
                _d2h(p, dev),
                direction="d2h",
            )
        )
        found.append(
            probe(
                4,
                "_copy_from",
                layout,
                f"device->device copy of the {layout} view",
                _d2d(p, dev),
                direction="d2d",
            )
        )
        if writable:
            found.append(
                probe(
                    4,
                    "_copy_from",
                    layout,
                    f"host->device copy into a {layout} view",
                    _h2d(p, dev, dtype),
                    direction="h2d",
                )
            )
    found += [
        probe(4, "_copy_from", "contiguous", "copies converting the dtype", _convert(values, dev)),
        probe(4, "_copy_from", "contiguous", "broadcasting copies", _broadcast(values, dev)),
    ]
    for layout, p in placements.items():
        if layout in layouts.READ_ONLY:
            continue
        fill = True if dtype == torch.bool else 3
        found.append(
            probe(
                5,
                "fill_.Scalar",
                layout,
                f"fill_ of the {layout} view",
                _write(p, dev, lambda t, v=fill: t.fill_(v)),
                direction="write",
            )
        )
        found.append(
            probe(
                6,
                "zero_",
                layout,
                f"zero_ of the {layout} view",
                _write(p, dev, torch.Tensor.zero_),
                direction="write",
            )
        )
    found.append(
        probe(
            7,
            "resize_",
            "contiguous",
            "resize_ keeps the old contents",
            _resize(values, dev),
            direction="any",
        )
    )
    return found


def _placed(p: layouts.Placement, dev) -> tuple[torch.Tensor, torch.Tensor]:
    base = to_device(p.base, dev)
    return base, base.as_strided(p.size, p.stride, p.offset)


def _as_strided(p: layouts.Placement, dev):
    def run() -> str | None:
        base, v = _placed(p, dev)
        if not has_storage(base):  # a lazy device's: the view's values are what can be seen
            return _same(read_back(v).contiguous(), p.values().contiguous())
        got = (tuple(v.shape), tuple(v.stride()), v.storage_offset())
        if got != (tuple(p.size), tuple(p.stride), p.offset):
            return f"gave size/stride/offset {got}, asked {(p.size, p.stride, p.offset)}"
        if v.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
            return "the view does not share its input's storage"
        if v.numel() and v.data_ptr() != base.data_ptr() + p.offset * base.element_size():
            return "data_ptr does not point at storage offset"
        return None

    return run


def _d2h(p: layouts.Placement, dev):
    def run() -> str | None:
        _, v = _placed(p, dev)
        return _same(to_host(v), p.values())

    return run


def _d2d(p: layouts.Placement, dev):
    def run() -> str | None:
        _, v = _placed(p, dev)
        dst = torch.empty(p.size, dtype=p.base.dtype, device=dev)
        dst.copy_(v)
        return _same(read_back(dst).contiguous(), p.values().contiguous())

    return run


def _h2d(p: layouts.Placement, dev, dtype):
    def run() -> str | None:
        base, v = _placed(p, dev)
        src = _values(dtype, tuple(p.size), sign=-1) if p.size else _values(dtype, (1,), -1)[0]
        v.copy_(src)
        want = p.base.clone()
        want.as_strided(p.size, p.stride, p.offset).copy_(src)
        return _same(read_storage(base), want)

    return run


def _write(p: layouts.Placement, dev, fn):
    def run() -> str | None:
        base, v = _placed(p, dev)
        fn(v)
        want = p.base.clone()
        fn(want.as_strided(p.size, p.stride, p.offset))
        return _same(read_storage(base), want)

    return run


def _convert(values: torch.Tensor, dev):
    def run() -> str | None:
        other = OTHER_DTYPE.get(values.dtype, torch.float64)
        flat = values.reshape(-1)
        want = flat.to(other)
        d = to_device(flat, dev)
        problem = _same(to_host(d, other), want)
        if problem:
            return f"device->host {values.dtype}->{other}: {problem}"
        o = torch.empty(flat.shape, dtype=other, device=dev)
        o.copy_(flat)
        problem = _same(read_storage(o), want)
        if problem:
            return f"host->device {values.dtype}->{other}: {problem}"
        o2 = torch.empty(flat.shape, dtype=other, device=dev)
        o2.copy_(d)
        problem = _same(read_storage(o2), want)
        return f"device->device {values.dtype}->{other}: {problem}" if problem else None

    return run


def _broadcast(values: torch.Tensor, dev):
    def run() -> str | None:
        src = values.reshape(-1)[:5].reshape(1, 5).clone()
        want = src.expand(4, 5).contiguous().reshape(-1)
        dst = torch.empty((4, 5), dtype=values.dtype, device=dev)
        dst.copy_(src)
        problem = _same(read_storage(dst), want)
        if problem:
            return f"host->device (1, 5) into (4, 5): {problem}"
        dst2 = torch.empty((4, 5), dtype=values.dtype, device=dev)
        dst2.copy_(to_device(src, dev))
        problem = _same(read_storage(dst2), want)
        return f"device->device (1, 5) into (4, 5): {problem}" if problem else None

    return run


def _resize(values: torch.Tensor, dev):
    def run() -> str | None:
        old = values.reshape(-1)[:6].clone()
        x = to_device(old, dev)
        x.resize_(values.numel())
        return _same(read_storage(x)[:6], old)

    return run
