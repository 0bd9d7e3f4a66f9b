"""Fixtures of the contract cases: the device runtime (`rt`), and the skip of an item whose
needs the device profile lacks (the profile's reason, said once in the run header). An item
that tested a fence on a stream it could not make busy passes with "not observable: ..." in its
record (user property `contract_unobserved`), counted in the summary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from conformance.engine import busy
from conformance.engine.backend import Backend
from conformance.engine.runtime_contract import ContractItem, item_of_test
from conformance.harness.nodes import leave_verdict
from conformance.harness.session import run_of


class ContractBroken(AssertionError):
    """A contract item the device breaks (the message names the item and the observation)."""


@dataclass
class Runtime:
    """The device under test as the contract cases see it."""

    backend: Backend
    item: ContractItem
    unobserved: dict[str, list[str]] = field(default_factory=dict)  # why -> streams not seen
    held_by: str = ""  # how its streams were held (busy.Hold.what)

    @property
    def device(self) -> torch.device:
        return self.backend.device

    @property
    def device_type(self) -> str:
        return self.backend.device_type

    @property
    def module(self) -> Any:
        return self.backend.device_module

    def on(self, index: int) -> torch.device:
        return torch.device(self.device_type, index)

    @property
    def second(self) -> int | None:
        return self.backend.profile.second_index.value

    def broken(self, message: str) -> ContractBroken:
        """The failure of this case's item: `raise rt.broken(...)`."""
        return ContractBroken(f"[contract {self.item.name}] {message} (expected: {self.item.what})")

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            raise self.broken(message)

    @contextmanager
    def busy(
        self,
        streams: dict[torch.Stream, float],
        delays: dict[Any, dict[str, float]] | None = None,
    ) -> Iterator[busy.Holds]:
        """Hold each stream busy for about its milliseconds (queued in that order) for the
        block (engine/busy.py: the set_delay hook, `_sleep` or calibrated work); the item calls
        `holds.seen(stream)` before each fence, and what it could not see is noted."""
        hook = self.backend.hook("set_delay")
        hold = busy.LOADER.for_device(self.device, self.module, hook)
        if not self.held_by:
            self.held_by = hold.what or hold.why
        with busy.holding(hold, hook, streams, delays) as holds:
            yield holds
        missed = holds.unobserved()
        if missed is not None:
            self.note_unobserved(missed[1], missed[0])

    def note_unobserved(self, why: str, streams: list[str] | None = None) -> None:
        """Say that the item passed without observing what `why` names (on these streams)."""
        seen = self.unobserved.setdefault(why, [])
        seen += [s for s in streams or () if s not in seen]

    def not_observed(self) -> str | None:
        """What the item passed without observing (its record's `not_observable`), or None."""
        return busy.said(self.unobserved) if self.unobserved else None

    def pinned(self, t: torch.Tensor) -> torch.Tensor:
        """A pinned copy of `t` (a device with streams pins memory: a refusal breaks the item)."""
        try:
            return t.pin_memory()
        except Exception as exc:  # noqa: BLE001 - said as the item's failure
            raise self.broken(
                f"pin_memory() raised {type(exc).__name__}: {str(exc)[:160]}"
            ) from None

    def idle(self) -> None:
        """Every stream of every device done before a case starts."""
        for index in range(max(1, torch.accelerator.device_count())):
            torch.accelerator.synchronize(index)


@pytest.fixture
def rt(request) -> Runtime:
    suite = run_of(request.config).suite
    item = item_of_test(request.node.name)
    assert item is not None, f"{request.node.name} is no item of engine/runtime_contract.py"
    reason = suite.backend.profile.missing(item.needs)
    if reason is not None:
        pytest.skip(f"not applicable: {reason} (device profile)")
    runtime = Runtime(suite.backend, item)
    leave_verdict(request.node, runtime)  # what it observed reaches the case's record
    if item.needs:
        runtime.idle()
    return runtime
