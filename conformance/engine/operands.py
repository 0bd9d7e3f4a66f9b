"""Which arguments of a schema are data operands: the values an op computes with (Tensor,
Tensor[] or Scalar inputs), as opposed to indices, masks, sizes, dims and options. The value
sets fill data operands with other values (samples/values.py), the exactness measurement refills
and converts them (engine/exactness.py), and the last-bit checks convert them again."""

from __future__ import annotations

from typing import Any

import torch

from conformance.engine.siblings import _is_out, _kind

# schema argument names that are never data operands
NOT_DATA = frozenset(
    {
        "index",
        "indices",
        "mask",
        "condition",
        "target",
        "offsets",
        "size",
        "stride",
        "dim",
        "dims",
        "lengths",
        "generator",
        "dtype",
        "layout",
        "device",
        "memory_format",
        "storage_offset",
        "source",
        "sorter",
        "boundaries",
    }
)


def kind(arg: Any) -> str:
    """siblings._kind, plus 'tensors' for a Tensor[] argument."""
    t = arg.type
    if isinstance(t, torch.ListType) and isinstance(t.getElementType(), torch.TensorType):
        return "tensors"
    return _kind(arg)


def data_args(schema: Any) -> list[tuple[int, Any]]:
    """(position, argument) of the data operands: Tensor, Tensor[] or Scalar inputs that are
    not indices, masks, sizes or options."""
    return [
        (i, a)
        for i, a in enumerate(schema.arguments)
        if not _is_out(a) and kind(a) in ("tensor", "tensors", "scalar") and a.name not in NOT_DATA
    ]
