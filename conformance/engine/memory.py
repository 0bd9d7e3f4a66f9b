"""Memory checks after each sample and case: red-zone corruption and leaked device memory.

Leaks are seen through every source the backend offers, standard ones first: a memory counter
of torch (`torch.accelerator.memory_allocated()`, else the device module's
`torch.<device>.memory_allocated()`; `engine/device_probe.py` keeps the first one that counts a
probe tensor) and the optional hook `live_blocks`, which also names the leaked blocks. Red zones
need the hooks `check_memory`/`clear_memory_errors` (docs/BACKEND_PROTOCOL.md). `sources()` says
which source each check uses, for the run header.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import torch

from conformance.engine import heap
from conformance.engine.backend import Backend
from conformance.engine.compare import Mismatch


def counters(backend: Backend) -> list[tuple[str, Callable[[], int]]]:
    """Standard counters of allocated device bytes that may apply to this backend, in order of
    preference (whether one counts this backend's memory is only known after an allocation)."""
    out: list[tuple[str, Callable[[], int]]] = []
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "memory_allocated"):
        current = accelerator.current_accelerator()
        if current is not None and current.type == backend.device_type:
            out.append(
                (
                    "torch.accelerator.memory_allocated()",
                    _accelerator_allocated(accelerator, backend.device.index),
                )
            )
    fn = backend.device_function("memory_allocated")
    if callable(fn):
        index = backend.device.index
        out.append((f"torch.{backend.device_type}.memory_allocated()", lambda: fn(index)))
    return out


def _accelerator_allocated(accelerator: Any, index: int | None) -> Callable[[], int]:
    """`torch.accelerator.memory_allocated(index)`. That function flattens all of the device's
    allocator statistics into a new dict on every call (about 150 us; the memory checks ask
    several times a case), so the same entry is read from the statistics it flattens, where this
    torch has them and the index is known; the public function otherwise."""
    public = lambda: accelerator.memory_allocated(index)  # noqa: E731
    stats = getattr(torch._C, "_accelerator_getDeviceStats", None)
    ready = getattr(torch._C, "_accelerator_isAllocatorInitialized", None)
    if index is None or stats is None or ready is None:
        return public

    def allocated() -> int:
        if not ready():  # as memory_stats(): no statistics before the allocator exists
            return 0
        return stats(index).get("allocated_bytes", {}).get("all", {}).get("current", 0)

    return allocated


def counter_named(backend: Backend, name: str | None) -> Callable[[], int] | None:
    return dict(counters(backend)).get(name) if name else None


def sources(backend: Backend, counter: str | None) -> dict[str, str]:
    """Per memory check, what it relies on (or why it is unavailable): for the run header."""
    leak = [counter] if counter else []
    if backend.hook("live_blocks") is not None:
        leak.append("live_blocks (names the blocks)")
    if not leak:
        leak_text = (
            "unavailable (no torch.accelerator or "
            f"torch.{backend.device_type}.memory_allocated() counts this device's memory, "
            "backend has no live_blocks)"
        )
    else:
        leak_text = " + ".join(leak)
    zones = (
        "check_memory"
        if backend.hook("check_memory") is not None
        else "unavailable, backend has no check_memory"
    )
    return {"leaks": leak_text, "red zones": zones, "heap red zones": heap_source(backend)}


def heap_source(backend: Backend) -> str:
    """What the suite's heap red zones watch (engine/heap.py), or why they watch nothing (the
    probe's account: in an xdist controller, or a parent of forked runners, too)."""
    zones = backend.profile.heap_zones
    if zones.value:
        return (
            f"the device's memory is allocated through the watched libraries, "
            f"{zones.how}: {heap.PAD} bytes after each block and freed blocks in "
            "quarantine, checked at free and after placing the inputs, the op and the sample "
            "(engine/heap.py)"
        )
    rest = (
        "memory checks rely on the backend's check_memory hook"
        if backend.hook("check_memory") is not None
        else "no red zones: heap corruption shows only where glibc notices it (a crash)"
    )
    return f"not watched ({zones.how}); {rest}"


def describe_corruption(record: dict) -> str:
    side = record.get("side", "?")
    where = f"{side} the block" if side in ("before", "after") else side
    text = (
        f"red zone {where} corrupted: block of {record.get('size')} bytes allocated by "
        f"{record.get('op') or 'an unknown op'}"
    )
    if record.get("offset") is not None:
        text += f", first bad byte at +{record['offset']}"
    if record.get("first_seen_after"):
        text += f"; first seen after {record['first_seen_after']}"
    return text


def heap_check(backend: Backend, where: str) -> None:
    """Raise Mismatch('memory') for what the suite's heap red zones found since their last
    check (engine/heap.py), said to have happened `where`."""
    if backend.heap is None:
        return
    found = backend.heap.check()
    if found:  # the first line names the root cause (findings group by it), the rest details
        details = f"\n  seen {found[0].when}"
        if found[1:]:
            details += f"; and {len(found) - 1} more: " + "; ".join(
                f"{e.describe()} (seen {e.when})" for e in found[1:3]
            )
        raise Mismatch("memory", f"{where}: {found[0].describe()}{details}")


class MemoryWatch:
    """Memory state at the start of a case; checks after each sample and at the end."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._check = backend.hook("check_memory")
        self._clear = backend.hook("clear_memory_errors")
        self._live = backend.hook("live_blocks")
        self._counter_name = backend.profile.memory_counter.value
        self._counter = counter_named(backend, self._counter_name)
        self._heap = backend.heap  # the suite's red zones (engine/heap.py), where installed
        if self._clear is not None:  # corruption from before this case was reported there
            self._clear()
        if self._heap is not None:
            self._heap.clear()
        self.start_serials = {b["serial"] for b in self._live()} if self._live else set()
        self.start_max = max(self.start_serials, default=-1)
        self.start_bytes = self._counter() if self._counter else 0

    def check_after(self, overload: str) -> None:
        """Raise Mismatch('memory') if any device block's red zone is corrupted (the suite's
        heap red zones first: they name the bytes written)."""
        heap_check(self.backend, f"after {overload} (reading its results back, or freeing them)")
        if self._check is None:
            return
        records = list(self._check())
        if not records:
            return
        if self._clear is not None:
            self._clear()
        first = describe_corruption(records[0])
        more = f" (+{len(records) - 1} more blocks)" if len(records) > 1 else ""
        raise Mismatch("memory", f"after {overload}: {first}{more}")

    def mark(self) -> None:
        """From now on, leaks are counted from here (memory the case left allocated so far is
        the baseline: `harness`'s second call of a sample asks whether it grows)."""
        live = self._live() if self._live else []
        self.start_max = max((b["serial"] for b in live), default=self.start_max)
        self.start_bytes = self._counter() if self._counter else 0

    def check_leaks(self, overload: str) -> None:
        """Raise Mismatch('leak') for device memory allocated during the case and still alive."""
        leaked = self._leaked_blocks()
        grown = self._grown_bytes()
        # maybe only held by a reference cycle: collect and look again, the young generations
        # first (the case's own garbage, as a scenario's model outputs: a full collection over
        # a heap holding torch and transformers costs about 20 ms), then the whole heap
        for generation in (1, 2):
            if not (leaked or grown):
                break
            gc.collect(generation)
            self.backend.synchronize()
            leaked = self._leaked_blocks()
            grown = self._grown_bytes()
        if leaked:
            total = sum(int(b["size"]) for b in leaked)
            ops = sorted({b.get("op") or "?" for b in leaked})
            raise Mismatch(
                "leak",
                f"{len(leaked)} device block(s), {total} bytes, allocated during "
                f"{overload} still alive after the case (allocated by "
                f"{', '.join(ops)})",
            )
        if grown:
            raise Mismatch(
                "leak",
                f"{grown} bytes of device memory allocated during {overload} still allocated "
                f"after the case ({self._counter_name} went from {self.start_bytes} to "
                f"{self.start_bytes + grown})",
            )

    def _leaked_blocks(self) -> list[dict]:
        if self._live is None:
            return []
        return [b for b in self._live() if b["serial"] > self.start_max]

    def _grown_bytes(self) -> int:
        if self._counter is None:
            return 0
        return max(0, int(self._counter()) - self.start_bytes)
