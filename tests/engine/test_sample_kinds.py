"""A reference input is "special" (NaN, infinities, subnormals, extremes) by the same answer
whether its float tensor is judged on values or on its bits (sample_kinds.is_special)."""

from __future__ import annotations

import pytest
import torch

from conformance.samples.sample_kinds import is_special


def _on_values(t: torch.Tensor) -> bool:
    """The rule on values: what the bits must answer."""
    info = torch.finfo(t.dtype)
    a = t.abs()
    return bool(
        (~torch.isfinite(t)).any() or (a >= info.max / 2).any() or ((a < info.tiny) & (a > 0)).any()
    )


def _edges(dtype: torch.dtype) -> list[float]:
    """Values at and one step either side of each threshold, of both signs, and the specials."""
    info = torch.finfo(dtype)
    out = []
    for x in (info.max / 2, info.tiny, info.max, 0.0, 1.0):
        v = torch.tensor(x, dtype=dtype)
        for y in (
            v,
            torch.nextafter(v, v.new_tensor(0.0)),
            torch.nextafter(v, v.new_tensor(1e308)),
        ):
            out += [y.item(), -y.item()]
    return out + [float("nan"), float("inf"), -float("inf"), info.tiny / 4]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_bits_give_the_values_answer_at_every_edge(dtype):
    ordinary = torch.randn(1000).to(dtype).clamp(-100, 100)
    assert not is_special(ordinary) and not _on_values(ordinary)
    for x in _edges(dtype):
        t = ordinary.clone()
        t[537] = x
        assert is_special(t) == _on_values(t), (dtype, x)
        assert is_special(t[537]) == _on_values(t[537]), (dtype, x)  # 0-dim
        assert is_special(t.reshape(40, 25).t()) == _on_values(t), (dtype, x)  # not contiguous
