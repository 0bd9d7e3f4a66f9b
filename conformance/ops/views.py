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
    """Growing (the storage must move, keeping its contents) and shrinking; a floating `self`
    keeps a zero of each sign, a NaN and a subnormal among its old contents, which a copy keeps
    bit for bit."""
    old = torch.arange(1, 25).to(dtype).reshape(4, 6)
    if dtype.is_floating_point:
        special = [0.0, -0.0, float("nan"), torch.finfo(dtype).tiny / 2]
        old.view(-1)[: len(special)] = torch.tensor(special, dtype=dtype)
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


_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _view_as_real_samples(dtype: torch.dtype) -> list[Call]:
    """Complex inputs whose parts are the case's dtype (the run's dtypes hold no complex one by
    default; the result is in the case's dtype)."""
    complex_dtype = _COMPLEX_OF[dtype]
    parts = torch.arange(1, 49, dtype=dtype).reshape(4, 6, 2) - 24.5
    whole = torch.view_as_complex(parts.contiguous()).to(complex_dtype)
    return [Call("view_as_real", (whole,)), Call("view_as_real", (whole[1:, ::2],))]


register(
    OpSpec(
        "view_as_real",
        samples=_view_as_real_samples,
        use_opinfo=False,
        dtypes=tuple(_COMPLEX_OF),
        layouts=STORAGE_KEEPING,
        notes="complex inputs of the case's real dtype: a view of the real and imaginary parts",
    )
)
