"""The device profile: every fact about the device the run depends on, learned once, frozen.

Each fact carries its value and how it was learned ("asked of torch ...", "probed in a forked
child: ...", "declared by the backend's hook ..."). The facts asked of torch are known when the
backend is loaded (`DeviceProfile.declared`); the probed ones come from the device probe
(`engine/probe.py`, in a child process where the device must stay uninitialised here) and are
merged in by `with_probe`. Child processes get the profile whole (`to_json` / `from_json`, the
variable `PROFILE_ENV`), never probe again.

Checks and modes declare what they need (`NEEDS`); `missing(needs)` says, in one place, why a
device lacks one. The run header prints the profile (`lines`), run.json holds it (`to_json`),
and `python -m conformance.profile --backend MODULE` prints it without running cases.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

#: the variable a parent sets for the child processes it starts (spawned runners, probes)
PROFILE_ENV = "CONFORMANCE_DEVICE_PROFILE"
NOT_PROBED = "not probed"


@dataclass(frozen=True)
class Fact:
    """One fact about the device: its value and how it was learned."""

    value: Any = None
    how: str = NOT_PROBED

    def describe(self) -> str:
        value = "none" if self.value is None else self.value
        if isinstance(value, bool):
            value = "yes" if value else "no"
        return f"{value} ({self.how})"


def _fact() -> Any:
    return field(default_factory=Fact)


@dataclass(frozen=True)
class DeviceProfile:
    """What the run knows about the device (see the module docstring)."""

    device_type: str = "?"
    dispatch_key: Fact = _fact()  # PrivateUse1, or an in-tree key (XLA, Lazy, ...)
    lazy_runtime: Fact = _fact()  # the lazy runtime behind the key (torch_xla, torch._lazy)
    usable: Fact = _fact()  # a tensor could be allocated (else: the error)
    storage: Fact = field(default_factory=lambda: Fact(True, NOT_PROBED))  # observable bytes
    memory_counter: Fact = _fact()  # the torch counter that sees the device's allocations
    fork_safe: Fact = _fact()  # a child forked from a clean process can use the device
    exclusive: Fact = _fact()  # a second process cannot open the device while one holds it
    compiler: Fact = _fact()  # the torch.compile backend of -compile cases
    device_count: Fact = _fact()
    second_index: Fact = _fact()  # the last index where there are several (never 0)
    streams: Fact = _fact()  # torch.Stream on the device: created, queried, synchronized
    events: Fact = _fact()  # torch.Event on the device: recorded, queried, synchronized
    pinned_memory: Fact = _fact()  # a CPU tensor can be pinned once the backend is imported
    generator: Fact = _fact()  # torch.Generator on the device: seeded, state read
    collectives: Fact = _fact()  # the c10d backend registered for the device type
    heap_zones: Fact = _fact()  # the suite's heap red zones see the device's memory
    delay_injector: Fact = _fact()  # the backend delays its streams' work (hook set_delay)

    # ---- building ----------------------------------------------------------------------------
    @classmethod
    def declared(
        cls,
        device_type: str,
        dispatch_key: str,
        lazy_runtime: str | None,
        compiler: str,
        collectives: str | None,
        delay_injector: bool = False,
    ) -> DeviceProfile:
        """The facts torch answers without touching the device or its driver (the device count
        is the probe's: asking it initialises some drivers)."""
        counted_by = "until probed: one device"
        device_count = 1
        return cls(
            device_type=device_type,
            dispatch_key=Fact(dispatch_key, "asked of torch (the key its kernels live under)"),
            lazy_runtime=Fact(lazy_runtime, "from the dispatch key (engine/lazy.py)"),
            compiler=Fact(
                compiler, "asked of Inductor (a scheduling registered for the device type)"
            ),
            device_count=Fact(device_count, counted_by),
            second_index=Fact(device_count - 1 if device_count > 1 else None, counted_by),
            collectives=Fact(collectives, "torch.distributed.Backend.default_device_backend_map"),
            delay_injector=Fact(
                delay_injector, "the backend module's set_delay hook (engine/protocol.py)"
            ),
        )

    def with_probe(self, found: dict[str, Fact]) -> DeviceProfile:
        """The profile with the probe's facts merged in (names of fields)."""
        return replace(self, **{k: v for k, v in found.items() if k in _FACTS})

    # ---- reading -----------------------------------------------------------------------------
    def value(self, name: str) -> Any:
        return getattr(self, name).value

    def missing(self, needs: Iterable[str]) -> str | None:
        """Why the device lacks one of `needs` (names of NEEDS), or None: it has them all."""
        for need in needs:
            test, reason = NEEDS[need]
            if not test(self):
                return reason
        return None

    def lines(self) -> list[str]:
        """The profile as run header lines."""
        return [f"{name}: {getattr(self, name).describe()}" for name in _FACTS]

    def to_json(self) -> dict[str, Any]:
        return {"device_type": self.device_type} | {
            name: asdict(getattr(self, name)) for name in _FACTS
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceProfile:
        facts = {k: Fact(**v) for k, v in data.items() if k in _FACTS}
        return cls(device_type=str(data.get("device_type", "?")), **facts)

    def dumps(self) -> str:
        return json.dumps(self.to_json())


_FACTS = tuple(f.name for f in fields(DeviceProfile) if f.name != "device_type")

#: what a check or a mode may need: (test of the profile, why a device without it is left out)
NEEDS: dict[str, tuple[Any, str]] = {
    "storage": (
        lambda p: bool(p.storage.value),
        "the device has no observable storage (a lazy device's)",
    ),
    "no storage": (
        lambda p: not p.storage.value,
        "the device's storage is observable: the checks by pointer apply instead",
    ),
    "lazy runtime": (
        lambda p: p.lazy_runtime.value is not None,
        "the device has no lazy runtime (torch_xla, torch._lazy)",
    ),
    "second device": (
        lambda p: p.second_index.value is not None,
        "the device module counts one device",
    ),
    "streams": (lambda p: bool(p.streams.value), "the device has no streams"),
    "events": (lambda p: bool(p.events.value), "the device has no events"),
    "generator": (
        lambda p: bool(p.generator.value),
        "the device has no torch.Generator (seeded, its state read)",
    ),
    "delay injector": (
        lambda p: bool(p.delay_injector.value),
        "the backend has no delay injector (hook set_delay)",
    ),
}
