"""Memory checks after each sample and case: red-zone corruption and leaked device blocks.

Uses the optional backend hooks `check_memory`, `clear_memory_errors` and `live_blocks`
(docs/BACKEND_PROTOCOL.md); a backend without them simply gets no memory checks.
"""

from __future__ import annotations

import gc

from conformance.engine.backend import Backend
from conformance.engine.compare import Mismatch


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


class MemoryWatch:
    """Snapshot of live device blocks at the start of a case; checks after each sample."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._check = backend.hook("check_memory")
        self._clear = backend.hook("clear_memory_errors")
        self._live = backend.hook("live_blocks")
        if self._clear is not None:  # corruption from before this case was reported there
            self._clear()
        self.start_serials = {b["serial"] for b in self._live()} if self._live else set()
        self.start_max = max(self.start_serials, default=-1)

    def check_after(self, overload: str) -> None:
        """Raise Mismatch('memory') if any device block's red zone is corrupted."""
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

    def check_leaks(self, overload: str) -> None:
        """Raise Mismatch('leak') for device blocks allocated during the case and still alive."""
        if self._live is None:
            return
        leaked = [b for b in self._live() if b["serial"] > self.start_max]
        if leaked:  # maybe only held by a reference cycle: collect (slow) and look again
            gc.collect()
            leaked = [b for b in self._live() if b["serial"] > self.start_max]
        if not leaked:
            return
        total = sum(int(b["size"]) for b in leaked)
        ops = sorted({b.get("op") or "?" for b in leaked})
        raise Mismatch(
            "leak",
            f"{len(leaked)} device block(s), {total} bytes, allocated during "
            f"{overload} still alive after the case (allocated by "
            f"{', '.join(ops)})",
        )
