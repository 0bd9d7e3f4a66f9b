"""Fixtures of the contract cases: the device runtime (`rt`), and the skip of an item whose
needs the device profile lacks (the profile's reason, said once in the run header)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from conformance.engine import streams
from conformance.engine.backend import Backend
from conformance.engine.runtime_contract import ContractItem, item_of_test
from conformance.harness.session import run_of


class ContractBroken(AssertionError):
    """A contract item the device breaks (the message names the item and the observation)."""


@dataclass
class Runtime:
    """The device under test as the contract cases see it."""

    backend: Backend
    item: ContractItem

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

    def delays(self, settings: dict[Any, dict[str, float]]):
        """Delay the work of these streams for a block (a no-op without the hook)."""
        return streams.delays(self.backend.hook("set_delay"), settings)

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
    if item.needs:
        runtime.idle()
    return runtime
