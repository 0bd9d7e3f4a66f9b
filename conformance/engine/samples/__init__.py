"""Sample sources: OpInfo (torch's op database, captured at the aten level) and per-op specs."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.engine.samples import opinfo
from conformance.ops import spec_for

MAX_OPINFO_SAMPLES = 8


def calls_for(overload: str, dtype: torch.dtype, cache_dir: str | None) -> list[Call]:
    """Every sample call of `overload` for `dtype`: the spec's own, then OpInfo's."""
    spec = spec_for(overload)
    own = spec.samples(dtype) if spec.samples is not None else []
    captured: list[Call] = []
    if spec.use_opinfo:
        captured = opinfo.captured_calls(overload, dtype, spec.opinfo_names, cache_dir)
        for twin_of, derive in TWINS:
            if captured:
                break
            source = twin_of(overload)
            if source is not None:
                twins = opinfo.captured_calls(source, dtype, spec.opinfo_names, cache_dir)
                captured = [c for c in (derive(t, overload) for t in twins) if c is not None]
    return dedupe(own) + widest_first(dedupe(captured))[:MAX_OPINFO_SAMPLES]


def scalar_twin(call: Call, overload: str) -> Call | None:
    """X.Tensor(self, other, ...) -> X.Scalar(self, <first element of other>, ...)."""
    if len(call.args) < 2 or not isinstance(call.args[1], torch.Tensor):
        return None
    other = call.args[1]
    if other.numel() == 0:
        return None
    scalar = other.reshape(-1)[0].item()
    return Call(overload, (call.args[0], scalar, *call.args[2:]), dict(call.kwargs))


def tensor_twin(call: Call, overload: str) -> Call | None:
    """X.Scalar(self, value, ...) -> X.Tensor(self, <value as a 0-dim tensor>, ...)."""
    if len(call.args) < 2 or isinstance(call.args[1], torch.Tensor):
        return None
    value = torch.tensor(call.args[1])
    return Call(overload, (call.args[0], value, *call.args[2:]), dict(call.kwargs))


def inplace_twin(call: Call, overload: str) -> Call | None:
    """X(self, ...) -> X_(self, ...): the in-place form of a unary op with the same arguments."""
    return Call(overload, call.args, dict(call.kwargs))


def _swap_suffix(overload: str, old: str, new: str) -> str | None:
    return overload.removesuffix(old) + new if overload.endswith(old) else None


def _functional_of(overload: str) -> str | None:
    name, dot, tag = overload.partition(".")
    return name[:-1] + dot + tag if name.endswith("_") and not name.startswith("_") else None


# When OpInfo reaches no call of an overload, derive its samples from a twin overload.
TWINS = [
    (lambda o: _swap_suffix(o, ".Scalar", ".Tensor"), scalar_twin),
    (lambda o: _swap_suffix(o, ".Tensor", ".Scalar"), tensor_twin),
    (_functional_of, inplace_twin),
]


def widest_first(calls: list[Call]) -> list[Call]:
    """Higher-rank samples first, so layouts that need 2-D or 4-D inputs find some."""
    return sorted(calls, key=lambda c: -max((t.dim() for t in c.tensors()), default=0))


def dedupe(calls: list[Call]) -> list[Call]:
    seen: set[str] = set()
    out = []
    for c in calls:
        key = c.signature()
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
