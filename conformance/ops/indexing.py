"""Advanced indexing, `x[idx]`: aten `index.Tensor` (and `index.Tensor_out`, derived from it).

Models reach it for gathers by position (`logits[:, -1]` with tensor indices, embeddings of
selected rows, masks). OpInfo has no entry named `index`, so the samples are written here:
integer, negative, broadcast and boolean indices, with `None` for untouched dimensions.
"""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register


def _data(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(4, 5, 6, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(4, 5, 6, generator=g).to(dtype)
    return torch.randint(-50, 50, (4, 5, 6), generator=g).to(dtype)


def _index_samples(dtype: torch.dtype) -> list[Call]:
    x = _data(dtype)
    rows = torch.tensor([0, 3, -1, 2])
    cols = torch.tensor([[1], [4]])  # broadcasts against rows' (4,) -> (2, 4)
    mask = torch.tensor([True, False, True, True, False])
    return [
        Call("index.Tensor", (x, [rows])),
        Call("index.Tensor", (x, [None, mask])),
        Call("index.Tensor", (x, [rows, None, torch.tensor([5, 0, 2, 1])])),
        Call("index.Tensor", (x, [cols, rows])),
        Call("index.Tensor", (x, [torch.tensor([], dtype=torch.long)])),
    ]


register(OpSpec("index.Tensor", samples=_index_samples, use_opinfo=False))
