"""Copies between devices and the scalar read-back: the primitives cpu_fallback is built on.

CPU has no `_copy_from` kernel; the reference is `dst.copy_(src)` on CPU. Copies into another
dtype are conversions, the device's own where it registers `_copy_from` only: its samples carry
the conversion matrix of conversions.py, and its results are exact.
"""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register
from conformance.ops.conversions import DTYPES, NOTE, edge_values

SHAPES = [(5, 6), (3, 4, 5), (2, 3, 4, 5), (7,), ()]
OTHER_DTYPE = {torch.float32: torch.float64, torch.bool: torch.float32}


def _values(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def _copy_samples(overload: str, dst_shape_of: callable) -> callable:
    def samples(dtype: torch.dtype) -> list[Call]:
        out = []
        for i, shape in enumerate(SHAPES):
            src = _values(shape, dtype, i)
            for dst_dtype in (dtype, OTHER_DTYPE.get(dtype, torch.float32)):
                dst = _values(dst_shape_of(shape), dst_dtype, 100 + i)
                out.append(Call(overload, (src, dst)))  # device -> device
                out.append(Call(overload, (src, dst), cpu_args=frozenset({1})))  # device -> cpu
                out.append(Call(overload, (src, dst), cpu_args=frozenset({0})))  # cpu -> device
        # the conversion matrix: the case's dtype into every other, at the edges (conversions.py)
        for target in DTYPES if dtype in DTYPES else ():
            if target == dtype:
                continue
            src = edge_values(dtype, target)
            dst = torch.zeros(dst_shape_of(tuple(src.shape)), dtype=target)
            for cpu_args in (frozenset(), frozenset({0}), frozenset({1})):
                out.append(Call(overload, (src, dst), cpu_args=cpu_args))
        # broadcast: src (1, 6) into dst (5, 6)
        if overload == "_copy_from":
            src, dst = _values((1, 6), dtype, 7), _values((5, 6), dtype, 8)
            for cpu_args in (frozenset(), frozenset({0}), frozenset({1})):
                out.append(Call(overload, (src, dst), cpu_args=cpu_args))
        return out

    return samples


def _copy_reference(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False):
    return dst.copy_(src)


def _copy_and_resize_reference(src: torch.Tensor, dst: torch.Tensor):
    return dst.resize_(src.shape).copy_(src)


register(
    OpSpec(
        "_copy_from",
        samples=_copy_samples("_copy_from", lambda s: s),
        use_opinfo=False,
        reference=_copy_reference,
        written_args=("dst",),
        check_aliasing=False,
        check_strides=False,
        value_sets=("special",),  # NaN, inf, -0.0 copied; dst is no operand to promote against
        exact=True,
        notes="reference is dst.copy_(src) on CPU; dst may be on CPU (device-to-host); " + NOTE,
    )
)
register(
    OpSpec(
        "_copy_from_and_resize",
        samples=_copy_samples("_copy_from_and_resize", lambda s: (0,)),
        use_opinfo=False,
        reference=_copy_and_resize_reference,
        written_args=("dst",),
        check_aliasing=False,
        check_strides=False,
        value_sets=("special",),
        exact=True,
        notes="dst starts empty and is resized to src's shape; " + NOTE,
    )
)


def _scalar_samples(dtype: torch.dtype) -> list[Call]:
    return [
        Call("_local_scalar_dense", (_values(shape, dtype, i),))
        for i, shape in enumerate([(), (1,), (1, 1)])
    ]


register(
    OpSpec(
        "_local_scalar_dense",
        samples=_scalar_samples,
        use_opinfo=False,
        notes="Tensor.item(): one element back to Python",
    )
)
