"""Which aten ops have an autocast kernel, per autocast dispatch key (the dispatcher's answer, no
device touched): the references (`AutocastCUDA`, `AutocastCPU`, `AutocastXPU` where torch has
registrations for it) and the device's own key (`Autocast<its dispatch key>`:
AutocastPrivateUse1, AutocastXLA). An op is named by its base name (`conv_transpose2d`): its
overloads share one policy."""

from __future__ import annotations

from collections import defaultdict

import torch

from conformance.engine.discovery import aten_registrations

REFERENCES = ("cuda", "cpu", "xpu")  # in the order a policy is taken from
REFERENCE_KEYS = {"cuda": "AutocastCUDA", "cpu": "AutocastCPU", "xpu": "AutocastXPU"}


def kernels(key: str) -> dict[str, list[str]]:
    """{base name: its overloads ("mm", "pow.Tensor_Scalar")} with a kernel under `key`; {} for
    a key the dispatcher does not know."""
    found: dict[str, list[str]] = defaultdict(list)
    try:
        overloads = aten_registrations(key)
    except RuntimeError:  # no such dispatch key in this torch
        return {}
    for overload in overloads:
        found[overload.split(".")[0]].append(overload)
    return {op: sorted(names) for op, names in sorted(found.items())}


def device_key(dispatch_key: str) -> str | None:
    """The autocast key of a device whose backend key is `dispatch_key` (None: torch has none:
    `torch.autocast` refuses the device type)."""
    key = f"Autocast{dispatch_key}"
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", key)
    except RuntimeError:
        return None
    return key


def reference_kernels() -> dict[str, dict[str, list[str]]]:
    """The reference devices' registrations (those torch has any for)."""
    out = {name: kernels(key) for name, key in REFERENCE_KEYS.items()}
    return {name: ops for name, ops in out.items() if ops}
