"""View ops: results must share storage with the input and reflect writes."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register


def _reshape_alias_samples(dtype: torch.dtype) -> list[Call]:
    base = torch.arange(24).to(dtype)
    return [
        Call("_reshape_alias", (base.reshape(4, 6), [24], [1])),
        Call("_reshape_alias", (base.reshape(4, 6), [2, 12], [12, 1])),
        Call("_reshape_alias", (base.reshape(2, 3, 4), [6, 4], [4, 1])),
    ]


# Explicit size/stride views read raw storage: layouts that shrink the backing buffer (stride 0,
# zero-size, 0-dim) would make the requested view out of bounds on CPU as well.
STORAGE_KEEPING = ("contiguous", "noncontiguous", "transposed", "sliced", "offset", "channels_last")
register(
    OpSpec(
        "_reshape_alias", samples=_reshape_alias_samples, use_opinfo=False, layouts=STORAGE_KEEPING
    )
)
register(OpSpec("as_strided", layouts=STORAGE_KEEPING))


def _resize_samples(dtype: torch.dtype) -> list[Call]:
    """Growing (the storage must move, keeping its contents) and shrinking."""
    old = torch.arange(1, 25).to(dtype).reshape(4, 6)
    return [
        Call("resize_", (old, [8, 6])),
        Call("resize_", (old, [5, 7])),
        Call("resize_", (old, [2, 3])),
    ]


register(
    OpSpec(
        "resize_",
        samples=_resize_samples,
        check_values=False,
        keeps_old_contents=True,
        notes="new elements are uninitialised; the old ones must keep their values",
    )
)
