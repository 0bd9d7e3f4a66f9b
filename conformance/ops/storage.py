"""`set_` with a storage or a tensor as source: the op `torch.load` and `Tensor.set_` reach.

OpInfo has no `set_` samples. Each sample points `self` at a source (a storage, or another
tensor's storage) with an offset and sizes/strides inside it; the storage is materialised on CPU
and on the device from the same bytes (placing.py), so `self` must read the same values after.
"""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register


def _source(dtype: torch.dtype, n: int = 24) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.arange(n) % 3 == 0
    return (torch.arange(n) - n // 2).to(dtype)


def _self(dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(2, 3, dtype=dtype)


def _storage_offset_samples(dtype: torch.dtype) -> list[Call]:
    storage = _source(dtype).untyped_storage()
    op = "set_.source_Storage_storage_offset"
    return [
        Call(op, (_self(dtype), storage, 0, [4, 6], [6, 1])),
        Call(op, (_self(dtype), storage, 5, [3, 4], [4, 1])),  # offset, a smaller view
        Call(op, (_self(dtype), storage, 2, [4, 3], [1, 4])),  # transposed strides
        Call(op, (_self(dtype), storage, 0, [0], [1])),  # empty view
    ]


def _storage_samples(dtype: torch.dtype) -> list[Call]:
    return [
        Call("set_.source_Storage", (_self(dtype), _source(dtype).untyped_storage())),
        Call("set_.source_Storage", (_self(dtype), _source(dtype, 0).untyped_storage())),
    ]


def _tensor_samples(dtype: torch.dtype) -> list[Call]:
    return [
        Call("set_.source_Tensor", (_self(dtype), _source(dtype).reshape(4, 6))),
        Call("set_.source_Tensor", (_self(dtype), _source(dtype, 5))),
    ]


def _tensor_offset_samples(dtype: torch.dtype) -> list[Call]:
    op = "set_.source_Tensor_storage_offset"
    return [
        Call(op, (_self(dtype), _source(dtype), 3, [3, 5], [5, 1])),
        Call(op, (_self(dtype), _source(dtype), 0, [2, 2], [1, 2])),
    ]


def _default_samples(dtype: torch.dtype) -> list[Call]:
    return [Call("set_", (_source(dtype).reshape(4, 6),))]


# self is replaced, not written: the layouts that reshape inputs would only move `self` around
LAYOUTS = ("contiguous", "noncontiguous", "transposed", "offset")
NOTES = "self now views the source: values, shape and strides compared"
for overload, samples in (
    ("set_.source_Storage_storage_offset", _storage_offset_samples),
    ("set_.source_Storage", _storage_samples),
    ("set_.source_Tensor", _tensor_samples),
    ("set_.source_Tensor_storage_offset", _tensor_offset_samples),
    ("set_", _default_samples),
):
    # exact: self's values are the source's own bits, nothing is computed (issue 79: 4 ulps
    # off in float64 passed the tolerance)
    register(
        OpSpec(
            overload, samples=samples, use_opinfo=False, layouts=LAYOUTS, notes=NOTES, exact=True
        )
    )
