"""`quantize_per_tensor`: OpInfo has no entry. Float inputs quantised to quint8, qint8 and
qint32, with values beyond the quantised range (they must saturate) and a zero point; the
integers and the quantisation parameters are compared (compare.py)."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register


def _samples(dtype: torch.dtype) -> list[Call]:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 6, generator=g) * 20).to(dtype)  # some values saturate
    return [
        Call("quantize_per_tensor", (x, 0.1, 3, torch.quint8)),
        Call("quantize_per_tensor", (x, 0.25, -4, torch.qint8)),
        Call("quantize_per_tensor", (x.reshape(2, 3, 4), 0.05, 0, torch.qint32)),
    ]


register(
    OpSpec(
        "quantize_per_tensor",
        samples=_samples,
        use_opinfo=False,
        dtypes=(torch.float32,),
        value_sets=(),
        notes="quantised outputs: int_repr, scale and zero point compared",
    )
)
