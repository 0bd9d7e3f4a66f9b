"""masked_fill_: the op behind the seed bug. Adds attention-mask shaped samples to OpInfo's:
a 4-D score tensor filled through a broadcast causal mask, with -inf as in transformers."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register


def _scores(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(2, 2, 6, 6, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(2, 2, 6, 6, generator=g).to(dtype)
    return torch.randint(-9, 9, (2, 2, 6, 6), generator=g).to(dtype)


def _causal() -> torch.Tensor:
    return ~torch.tril(torch.ones(6, 6, dtype=torch.bool))


def _fill_value(dtype: torch.dtype) -> float | int | bool:
    if dtype == torch.bool:
        return True
    return float("-inf") if dtype.is_floating_point else -7


def _scalar_samples(dtype: torch.dtype) -> list[Call]:
    value = _fill_value(dtype)
    return [
        Call("masked_fill_.Scalar", (_scores(dtype), _causal()[None, None], value)),
        Call("masked_fill_.Scalar", (_scores(dtype), _causal(), value)),
        Call("masked_fill_.Scalar", (_scores(dtype), torch.tensor(True), value)),
    ]


def _tensor_samples(dtype: torch.dtype) -> list[Call]:
    value = torch.tensor(_fill_value(dtype), dtype=dtype)
    return [
        Call("masked_fill_.Tensor", (c.args[0], c.args[1], value)) for c in _scalar_samples(dtype)
    ]


register(OpSpec("masked_fill_.Scalar", samples=_scalar_samples))
register(OpSpec("masked_fill_.Tensor", samples=_tensor_samples))
