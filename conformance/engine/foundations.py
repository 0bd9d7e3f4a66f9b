"""Foundations: the device ops the harness itself and cpu_fallback are built on, probed first
(engine/foundation_probes.py), and blame.

The probes of a dtype run the first time a case of that dtype fails (a correct backend never
pays). A failed case is blocked by a broken foundation only on evidence that concerns this case:

- the foundation is one the harness needs to place and read this case (allocation, the
  contiguous round trip, `as_strided` of the case's layout), or
- the case's overload is composed of it by contract (`_copy_from_and_resize`), in the case's
  layout, or
- the device call of the failed sample reaches it (nested aten calls, seen by the profiler) and
  the probe that failed is the use this sample makes of it: the case's own layout, and the
  direction of its path (cpu_fallback copies the arguments device->host and the written ones
  host->device; a native kernel copies device->device; fills and zeroes write into the view;
  resize_ is layout-free).

Anything else broken is only *related*: the case fails on its own, and its record names the
broken foundation it might be related to (a dtype-converting copy, another layout's copy). A
foundation case is only ever blocked by a more primitive foundation, never by itself, so the
first failing case of a run names the op that is actually wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.engine.foundation_probes import Probe, probe_specs
from conformance.record import FOUNDATION_ORDER, missing_kernel, same_overload

#: overloads a case of which is composed of foundation ops by contract
STATIC_DEPENDS: dict[str, tuple[str, ...]] = {
    "_copy_from_and_resize": ("_copy_from", "resize_"),
}
ORDER = FOUNDATION_ORDER  # foundation overloads, most primitive first (run first)


class Foundations:
    """Probes of one backend, run lazily per dtype and kept for the process."""

    def __init__(
        self,
        device: torch.device,
        registered: set[str] | None = None,
        prober: Callable[[torch.dtype], list[Probe]] | None = None,
        has_fallback: bool = True,
    ) -> None:
        self.device = device
        self.registered = registered
        self.has_fallback = has_fallback
        # how the probes run: in this process (None), or elsewhere (engine/probing.py, so a
        # probe that crashes or hangs cannot take a case with it)
        self.prober = prober
        self._broken: dict[torch.dtype, list[Probe]] = {}

    def broken(self, dtype: torch.dtype) -> list[Probe]:
        """The failed probes of `dtype`, most primitive first (probing on first use)."""
        if dtype not in self._broken:
            if self.prober is not None:
                found = self.prober(dtype)
            else:
                found = list(_probe_all(self, dtype))
            self._broken[dtype] = attributed(found)
        return self._broken[dtype]

    def path_of(self, op: str) -> str:
        """The path of `op`'s cases: native when registered (or when nothing could route it
        to a fallback), else fallback."""
        if self.registered is None or op in self.registered or not self.has_fallback:
            return "native"
        return "fallback"

    def scenario_blame(self, own: str = "") -> Blame:
        """A failed scenario is blocked by a foundation its own error says the device has no
        kernel for, or else only by what every scenario uses by construction: the harness's own
        foundations on contiguous memory (allocation, the round trip that reads results back),
        probed in float32, the scenarios' dtype. Any other broken foundation (a copy of some
        view layout, a conversion) might be related: the scenario still fails on its own."""
        if missing_kernel(own) is not None:
            return self.blame("", torch.float32, "contiguous", set, own=own)
        # a kernel the device lacks raises where it is used: not related to another failure
        broken = [p for p in self.broken(torch.float32) if not p.no_kernel]
        needed = next((p for p in broken if p.harness and p.layout == "contiguous"), None)
        if needed is not None:
            return Blame(needed)
        return Blame(related=broken[0] if broken else None)

    def blame(
        self,
        overload: str,
        dtype: torch.dtype,
        layout: str,
        ops_called: Callable[[], set[str]],
        via_fallback: bool = False,
        own: str = "",
        case_overload: str | None = None,
    ) -> Blame:
        """The broken foundation a failed case of `overload` depends on by evidence (blocking),
        else one it might be related to (see the module docstring). `own`: the case's own
        failure message; when it names a kernel the device lacks, that is the evidence: blocked
        by that foundation if it is one whose probe failed, else by nothing (the case's own
        failure: its own op unsupported, or another op it needs missing). `case_overload`: the
        case's op when `overload` is not (a -grad case passes "" to lift the rank limit)."""
        missing = missing_kernel(own)
        if missing is not None:
            return self._needs(missing, case_overload or overload, dtype, layout)
        # a kernel the device lacks raises where it is used: a case whose own failure does not
        # name it did not need it (nor is it related)
        probes = [p for p in self.broken(dtype) if not p.no_kernel]
        limit = RANK_OF_OP.get(overload, 10**6)
        candidates = sorted(
            (p for p in probes if p.rank < limit), key=lambda p: (p.rank, p.layout != layout)
        )
        if not candidates:
            return Blame()
        ours = ("contiguous", layout)
        for p in candidates:
            if p.harness and p.layout in ours:
                return Blame(p)
        static = STATIC_DEPENDS.get(overload, ())
        for p in candidates:
            if p.op in static and p.layout in ours:
                return Blame(p)
        called = ops_called()
        used = [p for p in candidates if p.op.split(".")[0] in called]
        directions = {"d2h", "h2d"} if via_fallback else {"d2d"}
        for p in used:
            if p.direction == "any" or (
                p.layout == layout and (p.direction == "write" or p.direction in directions)
            ):
                return Blame(p)
        return Blame(related=(used or candidates)[0])

    def _needs(self, missing: str, overload: str, dtype: torch.dtype, layout: str) -> Blame:
        """Blame for a case whose own error says the device has no kernel for `missing`."""
        if same_overload(missing, overload):
            return Blame()  # its own kernel: the case is unsupported, nothing else to blame
        probes = [p for p in self.broken(dtype) if same_overload(p.op, missing)]
        if not probes:
            return Blame()
        return Blame(min(probes, key=lambda p: (p.layout != layout, p.layout != "contiguous")))


def attributed(probes: list[Probe]) -> list[Probe]:
    """The failed probes that say something about their own foundation: a probe that failed
    only because the device has no kernel for another foundation whose own probe failed (a
    `_copy_from` of a transposed view that could not be made without `as_strided`) is that
    foundation's failure, already listed."""
    failed = {p.op.removesuffix(".default") for p in probes if p.no_kernel}
    kept = []
    for p in probes:
        missing = missing_kernel(p.message)
        if missing is not None and not p.no_kernel and missing in failed:
            continue
        kept.append(p)
    return kept


@dataclass(frozen=True)
class Blame:
    """What blame found: the foundation that blocks the case (evidence that this sample used
    the broken part), or only one that might be related (the case fails on its own)."""

    blocked_by: Probe | None = None
    related: Probe | None = None


#: the rank of each foundation's first probe: only more primitive probes can block its cases
RANK_OF_OP = {
    "empty.memory_format": 0,
    "empty_strided": 1,
    "_copy_from": 2,
    "as_strided": 3,
    "fill_.Scalar": 5,
    "zero_": 6,
    "resize_": 7,
    "_copy_from_and_resize": 8,
}


def _probe_all(f: Foundations, dtype: torch.dtype):
    """Yield a Probe for every failed check of `dtype`, most primitive first."""
    for spec in probe_specs(f, dtype):
        found = spec.run()
        if found is not None:
            yield found
