"""Convolution through `convolution_overrideable`, the entry point for backends without a native
convolution. CPU never calls it (it has its own kernels), so OpInfo cannot capture it: samples are
written here and the CPU reference is aten.convolution / aten.convolution_backward."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register, seeded_randn

aten = torch.ops.aten

# (input shape, weight shape, stride, padding, dilation, groups)
GEOMETRIES = [
    ((2, 3, 6, 6), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((1, 4, 7, 5), (6, 2, 3, 2), [2, 1], [0, 1], [1, 2], 2),
    ((2, 4, 9), (6, 2, 3), [2], [1], [1], 2),
]


def _forward_samples(dtype: torch.dtype) -> list[Call]:
    calls = []
    for i, (x, w, stride, padding, dilation, groups) in enumerate(GEOMETRIES):
        zeros = [0] * len(stride)
        args = (
            seeded_randn(x, dtype, i),
            seeded_randn(w, dtype, 10 + i),
            seeded_randn((w[0],), dtype, 20 + i),
            stride,
            padding,
            dilation,
            False,
            zeros,
            groups,
        )
        calls.append(Call("convolution_overrideable", args))
    return calls


def _backward_samples(dtype: torch.dtype) -> list[Call]:
    calls = []
    for i, fwd in enumerate(_forward_samples(dtype)):
        x, w, b, stride, padding, dilation, transposed, out_pad, groups = fwd.args
        out = aten.convolution(x, w, b, stride, padding, dilation, transposed, out_pad, groups)
        grad = seeded_randn(tuple(out.shape), dtype, 30 + i)
        args = (
            grad,
            x,
            w,
            stride,
            padding,
            dilation,
            transposed,
            out_pad,
            groups,
            [True, True, True],
        )
        calls.append(Call("convolution_backward_overrideable", args))
    return calls


def _backward_reference(grad, x, w, stride, padding, dilation, transposed, out_pad, groups, mask):
    return aten.convolution_backward(
        grad, x, w, [w.shape[0]], stride, padding, dilation, transposed, out_pad, groups, mask
    )


FLOATS = (torch.float32, torch.float64)
# Tolerance: the base of each dtype, no multiplier. Measured on torch 2.13 with
# `python -m conformance.measure.tolerances` (the samples above, every layout): CPU on a layout
# against contiguous copies max abs 1.4e-6 / 2.9e-6 (float32 forward / backward, x0.08 / x0.14 of
# the base); against float64 max abs 1.1e-6 / 4.2e-6 (x0.11 / x0.24).
register(
    OpSpec(
        "convolution_overrideable",
        samples=_forward_samples,
        use_opinfo=False,
        reference=aten.convolution.default,
        dtypes=FLOATS,
    )
)
register(
    OpSpec(
        "convolution_backward_overrideable",
        samples=_backward_samples,
        use_opinfo=False,
        reference=_backward_reference,
        dtypes=FLOATS,
    )
)
