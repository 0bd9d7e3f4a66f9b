"""Samples of an overload derived from a sibling overload's samples (its schema twin).

OpInfo reaches `eq.Tensor` but rarely `eq.Scalar_out`, `addmm` but not `addmm.out` (when the
OpInfo has no out=), `threshold_backward` but not `threshold_backward.grad_input`. Siblings are
the overloads of the same op (functional, in-place `name_`, out=) whose non-out arguments have
the same names: a sibling's call is re-typed argument by argument (a Tensor where a Scalar is
expected gives its first element, a number where a Tensor is expected a 0-dim tensor) and the
out= arguments are built from the functional result on CPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from conformance.engine.calls import Call


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


def ranked_sources(overload: str) -> list[str]:
    """Siblings whose calls can be re-typed into `overload`, fewest conversions first, then
    functional before in-place before out=."""
    target = schema_of(overload)
    if target is None:
        return []
    ranked = []
    for sibling in siblings(overload):
        source = schema_of(sibling)
        cost = match_cost(target, source) if source is not None else None
        if cost is not None:
            has_out = any(_is_out(a) for a in source.arguments)
            inplace = sibling.partition(".")[0].endswith("_")
            ranked.append((cost, has_out, inplace, sibling))
    return [s for *_, s in sorted(ranked)]


def _retype(value: Any, kind: str) -> tuple[bool, Any]:
    """(ok, value as `kind`)."""
    if kind == "scalar" and isinstance(value, torch.Tensor):
        if value.numel() == 0:
            return False, None
        return True, value.reshape(-1)[0].item()
    if kind == "tensor" and isinstance(value, bool | int | float | complex):
        return True, torch.tensor(value)
    return True, value


def derive(call: Call, overload: str, functional: Callable[..., Any] | None) -> Call | None:
    """`call` (of a sibling) as a call of `overload`; None when it cannot be converted."""
    target, source = schema_of(overload), schema_of(call.overload)
    if target is None or source is None:
        return None
    values: dict[str, Any] = {}
    for arg, value in zip(source.arguments, call.args, strict=False):
        values[arg.name] = value
    values.update(call.kwargs)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    missing = False
    for arg in _inputs(target):
        if arg.name not in values:
            missing = True
            continue
        ok, value = _retype(values[arg.name], _kind(arg))
        if not ok:
            return None
        if arg.kwarg_only or missing:
            kwargs[arg.name] = value
        else:
            args.append(value)
    outs = [a for a in target.arguments if _is_out(a)]
    if outs:
        built = _out_args(functional, args, kwargs, len(outs))
        if built is None:
            return None
        kwargs.update({a.name: t for a, t in zip(outs, built, strict=True)})
    return Call(overload, tuple(args), kwargs, cpu_args=call.cpu_args)


def _out_args(
    functional: Callable[..., Any] | None, args: list, kwargs: dict, n: int
) -> list[torch.Tensor] | None:
    """Zero tensors shaped like the functional result (the out= arguments to pass)."""
    if functional is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = functional(*args, **kwargs)
    except Exception:
        return None
    results = list(result) if isinstance(result, tuple | list) else [result]
    if len(results) != n or not all(isinstance(r, torch.Tensor) for r in results):
        return None
    if any(r.layout != torch.strided for r in results):
        return None  # a sparse result (`_to_sparse.out`): no dense out= to derive
    return [torch.zeros_like(r, memory_format=torch.contiguous_format) for r in results]


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
