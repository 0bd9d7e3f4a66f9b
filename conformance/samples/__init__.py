"""Sample sources: OpInfo (torch's op database, captured at the aten level) and per-op specs."""

from __future__ import annotations

import torch

from conformance.calls import Call
from conformance.ops import spec_for
from conformance.samples import opinfo

MAX_OPINFO_SAMPLES = 8


def calls_for(overload: str, dtype: torch.dtype, cache_dir: str | None) -> list[Call]:
    """Every sample call of `overload` for `dtype`: the spec's own, then OpInfo's."""
    spec = spec_for(overload)
    own = spec.samples(dtype) if spec.samples is not None else []
    captured: list[Call] = []
    if spec.use_opinfo:
        captured = opinfo.captured_calls(overload, dtype, spec.opinfo_names, cache_dir)
        if not captured and overload.endswith(".Scalar"):
            tensor_twin = overload.removesuffix(".Scalar") + ".Tensor"
            twins = opinfo.captured_calls(tensor_twin, dtype, spec.opinfo_names, cache_dir)
            captured = [c for c in map(scalar_twin, twins) if c is not None]
    return dedupe(own) + widest_first(dedupe(captured))[:MAX_OPINFO_SAMPLES]


def scalar_twin(call: Call) -> Call | None:
    """X.Tensor(self, other, ...) -> X.Scalar(self, <first element of other>, ...)."""
    if len(call.args) < 2 or not isinstance(call.args[1], torch.Tensor):
        return None
    other = call.args[1]
    if other.numel() == 0:
        return None
    scalar = other.reshape(-1)[0].item()
    name = call.overload.removesuffix(".Tensor") + ".Scalar"
    return Call(name, (call.args[0], scalar, *call.args[2:]), dict(call.kwargs))


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
