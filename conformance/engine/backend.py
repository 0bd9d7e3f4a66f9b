"""Load the backend under test and adapt its optional hooks (docs/BACKEND_PROTOCOL.md)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from conformance.engine.protocol import HOOK_NAMES, HOOKS
from conformance.errors import ConformanceUsageError


@dataclass
class Backend:
    """The backend module under test and the device it registered."""

    module_name: str
    module: ModuleType
    device_type: str
    _routable: dict[str, bool] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_type, 0)

    def hook(self, name: str) -> Any:
        """An optional protocol function of the backend module (engine/protocol.py), or None."""
        if name not in HOOK_NAMES:
            raise KeyError(f"{name!r} is not a hook of the backend protocol (engine/protocol.py)")
        return getattr(self.module, name, None)

    @property
    def can_route_fallback(self) -> bool:
        return self.hook("set_fallback_routes") is not None

    def allocator_mode(self) -> str:
        fn = self.hook("allocator_mode")
        return str(fn()) if fn else "unknown"

    @contextlib.contextmanager
    def routed_through_fallback(self, overload: str | None) -> Iterator[None]:
        """Route `overload` through cpu_fallback inside the block (no-op for None)."""
        if overload is None:
            yield
            return
        setter = self.hook("set_fallback_routes")
        getter = self.hook("get_fallback_routes")
        before = list(getter()) if getter else []
        setter(sorted(set(before) | {overload}))
        try:
            yield
        finally:
            setter(before)

    def fallback_routable(self, overload: str) -> bool:
        """Whether the backend accepts routing `overload` through cpu_fallback."""
        if overload not in self._routable:
            ok = self.can_route_fallback
            if ok:
                try:
                    with self.routed_through_fallback(overload):
                        pass
                except (ValueError, RuntimeError):
                    ok = False
            self._routable[overload] = ok
        return self._routable[overload]

    def fallback_count(self, overload: str) -> int | None:
        """How often `overload` went through cpu_fallback, if the backend counts it."""
        fn = self.hook("fallback_counts")
        if fn is None:
            return None
        return int(fn().get(overload, 0))

    def capabilities(self) -> list[str]:
        """The protocol hooks this backend offers."""
        return [h.name for h in HOOKS if self.hook(h.name) is not None]


def load_backend(module_name: str, device: str | None = None) -> Backend:
    """Import the backend module (which registers its device) and find its device type."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConformanceUsageError(
                f"backend module '{module_name}' is not importable: install it or pass "
                "--backend MODULE"
            ) from None
        raise ConformanceUsageError(f"importing backend '{module_name}' failed: {exc}") from None
    except Exception as exc:  # the backend's own one-line errors (e.g. bad env values)
        raise ConformanceUsageError(f"importing backend '{module_name}' failed: {exc}") from None
    device_type = device or torch._C._get_privateuse1_backend_name()
    try:
        torch.empty(1, device=device_type)
    except Exception as exc:
        raise ConformanceUsageError(
            f"backend '{module_name}' did not register a usable device '{device_type}' "
            f"({str(exc).splitlines()[0]}); pass --device"
        ) from None
    return Backend(module_name, module, device_type)
