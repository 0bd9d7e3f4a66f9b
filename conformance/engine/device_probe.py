"""The device probe as it runs in one process (a forked child, a fresh interpreter, or the
process itself: `probe.py` chooses): allocate a tensor and see which memory counter saw it,
whether it has storage and went through the heap red zones, the device count, then the runtime
around kernels (streams, events, pinned memory, generator). `Probe`: what it found, as the
device profile's facts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from conformance.engine import heap
from conformance.engine.backend import Backend
from conformance.engine.memory import counters
from conformance.engine.profile import Fact
from conformance.engine.transfer import has_storage

PROBE_ELEMENTS = 256  # float32: 1 KiB, enough for any allocator to count


@dataclass
class Probe:
    """What one probe found."""

    usable: bool
    where: str  # "forked child", "fresh process", "in-process"
    error: str = ""  # why the device was not usable
    memory_counter: str | None = None  # the first counter of memory.counters that saw the tensor
    # a non-empty tensor's storage has bytes and a data pointer (a lazy device's, as torch_xla's,
    # has none: strides, offsets and memory around views cannot be observed)
    storage: bool = True
    # the suite's heap red zones (engine/heap.py): what was installed, or why nothing was, and
    # whether the probe's device tensor was allocated through them
    heap: str = ""
    heap_seen: bool = False
    device_count: int | None = None  # the device module's device_count(), asked in the probe
    # a forked child of a clean process used the device (None: not tried) and how that was found
    fork: list = field(default_factory=lambda: [None, "not probed in a forked child"])
    # a second process could not open the device while the probe held it (None: not tried)
    exclusive: list = field(default_factory=lambda: [None, "not probed"])
    # the runtime around kernels (streams, events, pinned memory, generator): {fact: [value,
    # how]}, probed after the facts above (a probe that crashes here loses only these)
    runtime: dict[str, list] = field(default_factory=dict)

    def facts(self, where: str | None = None) -> dict[str, Fact]:
        """The probe's facts as device-profile facts (engine/profile.py)."""
        at = f"probed in a {where or self.where}"
        if not self.usable:
            return {"usable": Fact(False, f"{at}: {self.error}")}
        found = {
            "usable": Fact(True, f"{at}: a {PROBE_ELEMENTS}-element float32 tensor allocated"),
            "storage": Fact(self.storage, f"{at}: untyped_storage() has bytes and a data pointer"),
            "memory_counter": Fact(
                self.memory_counter, f"{at}: the first counter that saw the allocation"
            ),
            "fork_safe": Fact(*self.fork),
            "exclusive": Fact(*self.exclusive),
            "heap_zones": Fact(self.heap_seen, self.heap or at),
        }
        if self.device_count is not None:
            how = f"{at}: the device module's device_count()"
            found["device_count"] = Fact(self.device_count, how)
            second = self.device_count - 1 if self.device_count > 1 else None
            found["second_index"] = Fact(second, how)
        for name, (value, how) in self.runtime.items():
            found[name] = Fact(value, f"{at}: {how}")
        return found


def probe_here(
    backend: Backend, where: str = "in-process", at: Callable[[str], None] = lambda s: None
) -> Probe:
    """Allocate on the device in this process; find which memory counter sees the tensor
    (`at(stage)` is told each stage before it starts: a probe that hangs says where)."""
    in_bad_fork = backend.device_function("_is_in_bad_fork")
    try:
        if in_bad_fork is not None and in_bad_fork():
            return Probe(False, where, f"torch.{backend.device_type}._is_in_bad_fork() is True")
    except Exception:  # noqa: BLE001 - a broken query is not a verdict on the device
        pass
    candidates = counters(backend)
    at("installing the heap red zones")
    zones, how = heap.watch(backend.module, backend.heap_zones, backend.heap_cache)
    try:
        at("reading the memory counters")
        before = {name: _read(fn) for name, fn in candidates}
        heap_before = zones.stats() if zones is not None else None
        at("allocating the first tensor on the device (initialising it)")
        tensor = torch.empty(PROBE_ELEMENTS, dtype=torch.float32, device=backend.device)
        after = {name: _read(fn) for name, fn in candidates}
        heap_after = zones.stats() if zones is not None else None
        storage = has_storage(tensor)
        del tensor
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable here
        text = error_line(exc)
        return Probe(False, where, text)
    heap_seen = bool(
        heap_before
        and heap_after
        and heap_after[0] > heap_before[0]
        and heap_after[3] >= 4 * PROBE_ELEMENTS
    )
    if zones is not None and not heap_seen:
        how += "; the device's memory is not allocated through them (a pool of its own)"
    backend.heap = zones if heap_seen else None  # the process runs cases: it keeps them
    seen = None
    for name, _ in candidates:
        if (
            None not in (before[name], after[name])
            and after[name] - before[name] >= 4 * PROBE_ELEMENTS
        ):
            seen = name
            break
    probe = Probe(True, where, memory_counter=seen, storage=storage, heap=how, heap_seen=heap_seen)
    at("asking the device count")
    probe.device_count = backend.device_count()
    return probe


def probe_runtime(device: torch.device) -> dict[str, list]:
    """The runtime around kernels, each probed on its own: {fact: [value, how]}."""

    def stream() -> bool:
        module = getattr(torch, device.type, None)
        if not callable(getattr(module, "current_stream", None)):
            raise LookupError(
                f"torch.{device.type} has no current_stream(): its device module declares no "
                "streams"
            )
        s = torch.Stream(device=device)
        s.query()
        s.synchronize()
        return True

    def event() -> bool:
        s = torch.Stream(device=device)
        e = torch.Event(device=device)
        e.record(s)
        e.synchronize()
        e.query()  # what it answers is the contract cases' to judge (event-synchronize)
        return True

    def generator() -> bool:
        g = torch.Generator(device=device)
        g.manual_seed(1)
        return g.get_state().numel() > 0

    asks = {
        "streams": (
            stream,
            f"torch.{device.type}.current_stream() exists; torch.Stream(device) created, "
            "queried, synchronized",
        ),
        "events": (event, "torch.Event(device) recorded on a stream, synchronized, queried"),
        "pinned_memory": (
            lambda: bool(torch.empty(8).pin_memory().is_pinned()),
            "torch.empty(8).pin_memory().is_pinned()",
        ),
        "generator": (generator, "torch.Generator(device) seeded, its state read"),
    }
    found: dict[str, list] = {}
    for name, (ask, how) in asks.items():
        try:
            found[name] = [ask(), how]
        except Exception as exc:  # noqa: BLE001 - the device lacks it: say how it refused
            found[name] = [False, f"{how}: {type(exc).__name__}: {error_line(exc)[:120]}"]
    return found


def _read(fn) -> int | None:
    try:
        return int(fn())
    except Exception:  # noqa: BLE001 - a counter that raises is not usable
        return None


def error_line(exc: BaseException) -> str:
    """The first line of what `exc` says, or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
