"""What `import torch` registered, asked of torch and the installed distributions without
touching the device: the PrivateUse1 device (renamed or not), PyTorch's device autoload entry
points (group `torch.backends`), and the module that owns a device. `backend.py` decides from
these which module to load."""

from __future__ import annotations

import functools
import sys
from importlib import metadata

import torch

ENTRY_POINT_GROUP = "torch.backends"


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


@functools.cache
def entry_points() -> tuple[metadata.EntryPoint, ...]:
    """PyTorch's device autoload entry points (group `torch.backends`) installed here, read
    once per process: the scan reads every installed distribution's metadata (33 ms a call in
    a GPU image of 200 packages), and every record's repro line asks (owner_of)."""
    try:
        return tuple(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # noqa: BLE001 - broken metadata of an unrelated distribution
        return ()


def top_level(module: str) -> str:
    """The top-level package of a dotted module name."""
    return module.split(".")[0]


def entry_point_of(module: str) -> metadata.EntryPoint | None:
    """The `torch.backends` entry point of `module`'s top-level package, or None."""
    for ep in entry_points():
        if top_level(ep.value.split(":")[0]) == top_level(module):
            return ep
    return None


def owner_of(device: str) -> str | None:
    """The module that registered `device`: its device module's package, else the only
    `torch.backends` entry point whose package is imported."""
    device_module = getattr(torch, device, None)
    name = getattr(device_module, "__name__", None) or getattr(
        type(device_module), "__module__", None
    )
    if name and top_level(name) != "torch":
        return top_level(name)
    imported = {top_level(ep.value.split(":")[0]) for ep in entry_points()} & set(sys.modules)
    return imported.pop() if len(imported) == 1 else None


def autoload_enabled() -> bool:
    fn = getattr(torch, "_is_device_backend_autoload_enabled", None)
    return bool(fn()) if fn is not None else False
