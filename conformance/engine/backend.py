"""Load the backend under test and adapt its optional hooks (docs/BACKEND_PROTOCOL.md).

Loading never touches the device (a device that refuses a forked child once initialised must
stay uninitialised in the process that forks; `engine/probe.py` checks usability elsewhere) and
never imports a second PrivateUse1 backend: registering PrivateUse1 hooks twice aborts the
interpreter, so a conflict is a one-line `ConformanceUsageError` before any import.

Which module: `--backend` when given; else the backend that `import torch` already registered
(PyTorch's `torch.backends` entry points, "autoload"); else echo_npu.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import torch

from conformance.engine.protocol import HOOK_NAMES, HOOKS
from conformance.errors import ConformanceUsageError

DEFAULT_BACKEND = "echo_npu"
ENTRY_POINT_GROUP = "torch.backends"


@dataclass
class Backend:
    """The backend module under test and the device it registered."""

    module_name: str
    module: ModuleType
    device_type: str
    how_loaded: str = "imported"  # for the run header
    # the torch memory counter that sees this device's allocations (engine/probe.py), if any
    memory_counter: str | None = None
    _routable: dict[str, bool] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_type, 0)

    @property
    def device_module(self) -> Any:
        """`torch.<device>` (the backend's device module), or None."""
        return getattr(torch, self.device_type, None)

    def device_function(self, name: str) -> Any:
        """A function of the device module (`torch.npu.memory_allocated`), or None."""
        return getattr(self.device_module, name, None)

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
        """Route `overload` through cpu_fallback inside the block (no-op for None).

        Without `get_fallback_routes` the routes in force before the block are unknown: the
        block ends with no route at all (the run header says so)."""
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


# ---- what `import torch` registered -------------------------------------------------------------
def registered_device() -> str | None:
    """The PrivateUse1 device registered in this process (renamed or not), or None.

    A backend that keeps the name `privateuseone` is seen by what it registered: a device
    module `torch.privateuseone`, a boxed fallback or any aten kernel for PrivateUse1 (a bare
    torch has none of them)."""
    name = torch._C._get_privateuse1_backend_name()
    if name != "privateuseone" or hasattr(torch, name):
        return name
    key = torch._C.DispatchKey.PrivateUse1
    if torch._C._dispatch_has_backend_fallback(key):
        return name
    for qualified in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"):
        if qualified.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified, "PrivateUse1"
        ):
            return name
    return None


def entry_points() -> list[metadata.EntryPoint]:
    """PyTorch's device autoload entry points (group `torch.backends`) installed here."""
    try:
        return list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # noqa: BLE001 - broken metadata of an unrelated distribution
        return []


def _top(module: str) -> str:
    return module.split(".")[0]


def _entry_point_of(module: str) -> metadata.EntryPoint | None:
    for ep in entry_points():
        if _top(ep.value.split(":")[0]) == _top(module):
            return ep
    return None


def owner_of(device: str) -> str | None:
    """The module that registered `device`: its device module's package, else the only
    `torch.backends` entry point whose package is imported."""
    device_module = getattr(torch, device, None)
    name = getattr(device_module, "__name__", None) or getattr(
        type(device_module), "__module__", None
    )
    if name and _top(name) != "torch":
        return _top(name)
    imported = {_top(ep.value.split(":")[0]) for ep in entry_points()} & set(sys.modules)
    return imported.pop() if len(imported) == 1 else None


def autoload_enabled() -> bool:
    fn = getattr(torch, "_is_device_backend_autoload_enabled", None)
    return bool(fn()) if fn is not None else False


# ---- loading ------------------------------------------------------------------------------------
def load_backend(module_name: str | None, device: str | None = None) -> Backend:
    """Find or import the backend module (which registers its device); never touch the device."""
    already = registered_device()
    owner = owner_of(already) if already else None
    if module_name is None:
        if already is not None:
            if owner is None:
                raise ConformanceUsageError(
                    f"import torch registered a PrivateUse1 device '{already}' but its module "
                    "is unknown; pass --backend MODULE (the module that registers it)"
                )
            ep = _entry_point_of(owner)
            how = (
                f"registered by import torch (torch.backends entry point '{ep.name} = {ep.value}')"
                if ep
                else "registered by import torch"
            )
            return _backend(owner, device, how)
        module_name = DEFAULT_BACKEND
    if already is not None:
        if _top(module_name) in sys.modules and (owner is None or owner == _top(module_name)):
            return _backend(module_name, device, "registered by import torch (autoload)")
        raise ConformanceUsageError(
            f"--backend {module_name}: import torch already registered the PrivateUse1 backend "
            f"'{already}' ({'module ' + owner if owner else 'unknown module'}, through its "
            "torch.backends entry point) and a process holds only one; omit --backend to test "
            f"it, or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to test {module_name}"
        )
    _import(module_name)
    how = "imported"
    if registered_device() is None:
        ep = _entry_point_of(module_name)
        if ep is not None:  # registration lives in the entry point (autoload is off)
            try:
                ep.load()()
            except Exception as exc:  # noqa: BLE001
                raise ConformanceUsageError(
                    f"backend '{module_name}': its torch.backends entry point '{ep.value}' "
                    f"failed: {_first_line(exc)}"
                ) from None
            how = f"imported, then its torch.backends entry point '{ep.value}' called"
    if registered_device() is None and device is None:
        raise ConformanceUsageError(
            f"importing backend '{module_name}' registered no PrivateUse1 device; pass the "
            "module that registers your device with --backend (or its device name with --device)"
        )
    return _backend(module_name, device, how)


def _backend(module_name: str, device: str | None, how: str) -> Backend:
    module = sys.modules.get(module_name) or _import(module_name)
    return Backend(module_name, module, device or torch._C._get_privateuse1_backend_name(), how)


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConformanceUsageError(
                f"backend module '{module_name}' is not importable: install it or pass "
                "--backend MODULE"
            ) from None
        raise ConformanceUsageError(
            f"importing backend '{module_name}' failed: {_first_line(exc)}"
        ) from None
    except Exception as exc:  # the backend's own one-line errors (e.g. bad env values)
        raise ConformanceUsageError(
            f"importing backend '{module_name}' failed: {_first_line(exc)}"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
