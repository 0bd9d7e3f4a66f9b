"""The sibling overloads of an op, by schema: `name`, `name_` and their out= tags, whose non-out
arguments have the same names (samples/twins.py re-types samples between them; the checks ask
the functional sibling of an in-place or out= overload for its tags and gradients)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _is_out(arg: Any) -> bool:
    return bool(arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write)


def _kind(arg: Any) -> str:
    """'tensor', 'scalar' or 'other' for a schema argument (optional types unwrapped)."""
    t = arg.type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    if isinstance(t, torch.TensorType):
        return "tensor"
    if isinstance(t, torch.NumberType):  # Scalar
        return "scalar"
    return "other"


def schema_of(overload: str) -> Any | None:
    name, _, tag = overload.partition(".")
    packet = getattr(torch.ops.aten, name, None)
    op = getattr(packet, tag or "default", None) if packet is not None else None
    return op._schema if op is not None else None


def siblings(overload: str) -> list[str]:
    """Other overloads of the same op: `name`, `name_` and their tags."""
    name = overload.partition(".")[0]
    stem = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    out = []
    for candidate in (stem, stem + "_"):
        packet = getattr(torch.ops.aten, candidate, None)
        if packet is None:
            continue
        for tag in packet.overloads():
            full = candidate if tag == "default" else f"{candidate}.{tag}"
            if full != overload:
                out.append(full)
    return out


def _inputs(schema: Any) -> list[Any]:
    return [a for a in schema.arguments if not _is_out(a)]


def match_cost(target: Any, source: Any) -> int | None:
    """Conversions needed to call `target` with `source`'s inputs (None: they do not match)."""
    t_in, s_in = _inputs(target), _inputs(source)
    if [a.name for a in t_in] != [a.name for a in s_in]:
        return None
    cost = 0
    for a, b in zip(t_in, s_in, strict=True):
        ka, kb = _kind(a), _kind(b)
        if ka != kb:
            if {ka, kb} != {"tensor", "scalar"}:
                return None
            cost += 1
    return cost


def functional_of(overload: str) -> Callable[..., Any] | None:
    """The sibling without out= arguments whose inputs match `overload`'s exactly."""
    target = schema_of(overload)
    if target is None:
        return None
    for sibling in siblings(overload):
        if sibling.partition(".")[0].endswith("_"):
            continue
        source = schema_of(sibling)
        if source is None or any(_is_out(a) for a in source.arguments):
            continue
        if match_cost(target, source) == 0:
            name, _, tag = sibling.partition(".")
            return getattr(getattr(torch.ops.aten, name), tag or "default")
    return None
