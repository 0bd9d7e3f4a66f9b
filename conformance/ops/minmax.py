"""`max.out` / `min.out` (elementwise, `torch.max(a, b, out=...)`): OpInfo reaches them only
through `maximum`/`minimum`, so the samples are written here: broadcasting operands, NaN
(which both propagate) and the out= tensor in the result's shape."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.engine.poison import out_like
from conformance.ops import OpSpec, register


def _operands(dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)

    def make(*shape: int) -> torch.Tensor:
        if dtype == torch.bool:
            return torch.rand(*shape, generator=g) > 0.5
        if dtype.is_floating_point:
            return torch.randn(*shape, generator=g).to(dtype)
        return torch.randint(-20, 20, shape, generator=g).to(dtype)

    pairs = [(make(3, 4), make(3, 4)), (make(2, 3, 4), make(4)), (make(5, 1), make(1, 6))]
    if dtype.is_floating_point:
        a, b = make(2, 5), make(2, 5)
        a[0, 1], b[1, 3] = float("nan"), float("nan")
        pairs.append((a, b))
    return pairs


def _samples(name: str):
    reference = getattr(torch, "maximum" if name == "max" else "minimum")

    def samples(dtype: torch.dtype) -> list[Call]:
        return [
            Call(f"{name}.out", (a, b), {"out": out_like(reference(a, b))})
            for a, b in _operands(dtype)
        ]

    return samples


register(OpSpec("max.out", samples=_samples("max"), use_opinfo=False))
register(OpSpec("min.out", samples=_samples("min"), use_opinfo=False))
