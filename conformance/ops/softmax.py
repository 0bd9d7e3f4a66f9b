"""The out= forms of softmax and log_softmax (and their backward): the reference is the
functional op copied into `out`, because CPU's own out= kernels are wrong for a
non-contiguous `out` on torch 2.13:

    x = torch.randn(5, 10, 10)[..., ::2]; out = torch.zeros(5, 10, 10)[..., ::2]
    torch.ops.aten._log_softmax.out(x, 2, False, out=out)   # != torch.log_softmax(x, 2)

Comparing a device against that would blame it for CPU's bug. The out= contract itself (resize
an out of another shape, keep its strides otherwise, return it) is what `_into` does.
"""

from __future__ import annotations

import torch

from conformance.ops import OpSpec, register

aten = torch.ops.aten


def _into(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def _softmax_out(self, dim, half_to_float, *, out):
    return _into(out, aten._softmax(self, dim, half_to_float))


def _log_softmax_out(self, dim, half_to_float, *, out):
    return _into(out, aten._log_softmax(self, dim, half_to_float))


def _softmax_backward_out(grad_output, output, dim, input_dtype, *, grad_input):
    return _into(grad_input, aten._softmax_backward_data(grad_output, output, dim, input_dtype))


def _log_softmax_backward_out(grad_output, output, dim, input_dtype, *, out):
    return _into(out, aten._log_softmax_backward_data(grad_output, output, dim, input_dtype))


NOTE = "reference: the functional op copied into out (CPU's out= kernel is wrong when strided)"
register(OpSpec("_softmax.out", reference=_softmax_out, notes=NOTE))
register(OpSpec("_log_softmax.out", reference=_log_softmax_out, notes=NOTE))
register(OpSpec("_softmax_backward_data.out", reference=_softmax_backward_out, notes=NOTE))
register(OpSpec("_log_softmax_backward_data.out", reference=_log_softmax_backward_out, notes=NOTE))
