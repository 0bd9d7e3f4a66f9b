"""Ask the dispatcher which aten overloads the backend registered a kernel for."""

from __future__ import annotations

import torch

DISPATCH_KEY = "PrivateUse1"


def overload_name(qualified: str) -> str:
    """'aten::add.Tensor' -> 'add.Tensor'; 'aten::abs' -> 'abs'."""
    return qualified.split("::", 1)[-1]


def resolve(overload: str) -> torch._ops.OpOverload:
    """The OpOverload object for 'add.Tensor' / 'abs'."""
    name, _, ov = overload.partition(".")
    packet = getattr(torch.ops.aten, name)
    return getattr(packet, ov or "default")


def registered_overloads(dispatch_key: str = DISPATCH_KEY) -> list[str]:
    """Sorted aten overloads with a direct kernel for the dispatch key."""
    names = torch._C._dispatch_get_registrations_for_dispatch_key(dispatch_key)
    out = set()
    for qualified in names:
        if not qualified.startswith("aten::"):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, dispatch_key):
            out.add(overload_name(qualified))
    return sorted(out)


def has_backend_fallback(dispatch_key: str = DISPATCH_KEY) -> bool:
    """True when the backend registered a boxed fallback (e.g. cpu_fallback)."""
    table = torch._C._dispatch_dump_table("aten::nonzero")  # has only a CPU/CUDA kernel
    return any(
        line.startswith(dispatch_key + ":") and "[backend fallback]" in line
        for line in table.splitlines()
    )


def how_reached(overload: str, dispatch_key: str = DISPATCH_KEY) -> str:
    """'kernel', 'default backend kernel', 'backend fallback' or 'none' for one overload."""
    table = torch._C._dispatch_dump_table("aten::" + overload)
    for line in table.splitlines():
        if line.startswith(dispatch_key + ":"):
            return line.rsplit("[", 1)[-1].rstrip("]")
    return "none"


def fallback_overloads(known_bases: set[str], dispatch_key: str = DISPATCH_KEY) -> list[str]:
    """Aten overloads the backend handles only through its boxed fallback, limited to ops whose
    base name is in `known_bases` (those we have samples for)."""
    out = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name[len("aten::") :]
        overload = f"{name}.{schema.overload_name}" if schema.overload_name else name
        if name.strip("_") in known_bases and how_reached(overload, dispatch_key) == (
            "backend fallback"
        ):
            out.add(overload)
    return sorted(out)
