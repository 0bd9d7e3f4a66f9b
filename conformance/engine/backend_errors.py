"""The one-line errors of loading a backend (engine/backend.py): a module that registered no
device, a --device that is not the registered one, the backend's own error's first line; each
names the fix."""

from __future__ import annotations

import inspect
import re
from types import ModuleType

import torch

from conformance.engine.device_keys import in_tree_devices

#: names of functions that may register a device
_REGISTERING = re.compile(r"regist|init|setup|enable|load|install|activate|attach", re.I)


def registration_hint(module: ModuleType) -> str:
    """The module's public functions whose names suggest they register a device."""
    names = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and _REGISTERING.search(name) and inspect.isfunction(value)
    ]
    return ", ".join(sorted(names)[:8])


def registered_nothing(module: ModuleType, module_name: str, register: str) -> str:
    """The one-line error for a backend module that registered no PrivateUse1 device."""
    if register:
        return (
            f"--backend {module_name}:{register}: importing {module_name} and calling "
            f"{register}() registered no PrivateUse1 device; pass the module and function that "
            "register your device"
        )
    hint = registration_hint(module)
    example = hint.split(", ")[0] if hint else "FUNCTION"
    others = in_tree_devices()
    return (
        f"importing backend '{module_name}' registered no PrivateUse1 device; if a function "
        f"registers it, pass --backend {module_name}:{example}"
        + (f" ({module_name} has: {hint})" if hint else "")
        + ", else the module whose import registers it"
        + (
            f"; devices with kernels of their own dispatch key here: {', '.join(others)} "
            "(pass --device TYPE)"
            if others
            else ""
        )
    )


def unknown_device(device: str, registered: str) -> str:
    """The one-line error for a --device that is not the registered PrivateUse1 device."""
    try:
        torch.device(device)
        known = True
    except RuntimeError:
        known = False
    what = "is another device type" if known else "is not a device type torch knows"
    return (
        f"--device {device}: {what}; the PrivateUse1 device registered here is '{registered}' "
        f"(pass --device {registered} or leave --device out)"
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
