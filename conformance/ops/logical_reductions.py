"""`any` and `all` over a whole tensor: OpInfo's samples of them reduce to the same answer
whichever elements are read (issue 79: a kernel that reads a strided input as if contiguous
passed every layout). Two samples make the answer hang on every element: none set (any is
False; a read past the view finds the layouts' padding, which is set) and one unset at the
end (all is False; a read that stops short or wanders into the padding misses it)."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register


def _samples(overload: str):
    def samples(dtype: torch.dtype) -> list[Call]:
        none_set = torch.zeros(4, 6, dtype=dtype)
        last_unset = torch.ones(6, 4, dtype=dtype)  # another shape: samples are one per shape
        last_unset[-1, -1] = 0
        return [Call(overload, (none_set,)), Call(overload, (last_unset,))]

    return samples


for _overload in ("any", "all"):
    register(OpSpec(_overload, samples=_samples(_overload)))
