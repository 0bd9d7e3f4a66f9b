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
from conformance.engine.poison import out_like
from conformance.engine.siblings import (  # noqa: F401 - functional_of: also from here
    _inputs,
    _is_out,
    _kind,
    functional_of,
    match_cost,
    schema_of,
    siblings,
)


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
    """The out= arguments to pass: shaped like the functional result, unlike it in value
    (engine/poison.py)."""
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
    return [out_like(r) for r in results]
