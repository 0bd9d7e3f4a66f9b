"""Scaled dot product attention as a backend provides it: `_fused_sdp_choice` and the
`_scaled_dot_product_fused_attention_overrideable` forward and backward that PyTorch calls for a
PrivateUse1 device whose choice is "overrideable".

CPU has no kernel for the overrideable ops; the reference is SDPA's math path (forward) and
autograd through it (backward). Only the attention output (forward) and the gradients of query,
key and value (backward) are compared: the other results (logsumexp layout, sequence offsets,
RNG seed and offset, debug mask) are the backend's own business. An uninitialised or wrong
output, the bug a backend once shipped here, fails `values`.
"""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register

aten = torch.ops.aten
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Tolerance: the base of each dtype, no multiplier. Measured on torch 2.13 with
# `python -m conformance.measure.tolerances` (the samples below, every layout): the math path on a
# layout against contiguous copies max rel 1.3e-5 / 3.5e-5 (float32 forward / backward, x0.03 of
# the base); against float64 max abs 3.1e-7 / 4.9e-7 (float32, x0.05), 9.4e-4 / 9.2e-4 (float16,
# rel 4.8e-4, x0.47), 5.9e-3 / 5.8e-3 (bfloat16, rel 3.9e-3, x0.24).
# (batch, heads, query length, key length, head dim, bias?, causal?, scale)
GEOMETRIES = [
    (2, 2, 5, 5, 8, False, False, None),
    (1, 4, 6, 6, 16, False, True, None),
    (2, 2, 4, 7, 8, True, False, 0.5),
]


def _qkv(b, h, lq, lk, e, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, e, generator=g).to(dtype)
    k = torch.randn(b, h, lk, e, generator=g).to(dtype)
    v = torch.randn(b, h, lk, e, generator=g).to(dtype)
    return q, k, v


def _bias(b, lq, lk, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(b, 1, lq, lk, generator=g) > 0.3
    keep[..., 0] = True  # every query sees at least one key
    return torch.zeros(b, 1, lq, lk).masked_fill(~keep, float("-inf")).to(dtype)


def _forward_samples(dtype: torch.dtype) -> list[Call]:
    calls = []
    for i, (b, h, lq, lk, e, has_bias, causal, scale) in enumerate(GEOMETRIES):
        q, k, v = _qkv(b, h, lq, lk, e, dtype, i)
        bias = _bias(b, lq, lk, dtype, 10 + i) if has_bias else None
        calls.append(
            Call(
                "_scaled_dot_product_fused_attention_overrideable",
                (q, k, v, bias, 0.0, causal, False),
                {"scale": scale},
            )
        )
    return calls


def _math(q, k, v, bias, causal, scale):
    return aten._scaled_dot_product_attention_math(q, k, v, bias, 0.0, causal, scale=scale)


def _logsumexp(q, k, bias, causal, scale):
    s = scale if scale is not None else q.shape[-1] ** -0.5
    scores = (q.float() @ k.float().transpose(-2, -1)) * s
    if bias is not None:
        scores = scores + bias.float()
    if causal:
        lq, lk = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(), float("-inf"))
    return torch.logsumexp(scores, dim=-1)


def _forward_reference(
    q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None
):
    out, _ = _math(q, k, v, attn_bias, is_causal, scale)
    empty = torch.empty(0, dtype=torch.int64)
    lse = _logsumexp(q, k, attn_bias, is_causal, scale)
    return out, lse, empty, empty, q.shape[-2], k.shape[-2], empty, empty, torch.empty(0)


def _backward_samples(dtype: torch.dtype) -> list[Call]:
    calls = []
    for i, fwd in enumerate(_forward_samples(dtype)):
        q, k, v, bias, _, causal, _ = fwd.args
        scale = fwd.kwargs["scale"]
        out, lse, cq, ck, mq, mk, seed, offset, _ = _forward_reference(
            q, k, v, bias, 0.0, causal, scale=scale
        )
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(20 + i)).to(dtype)
        args = (
            grad,
            q,
            k,
            v,
            bias,
            [True, True, True, bias is not None],
            out,
            lse,
            cq,
            ck,
            mq,
            mk,
            0.0,
            causal,
            seed,
            offset,
        )
        calls.append(
            Call(
                "_scaled_dot_product_fused_attention_overrideable_backward", args, {"scale": scale}
            )
        )
    return calls


def _backward_reference(
    grad,
    q,
    k,
    v,
    bias,
    mask,
    out,
    lse,
    cq,
    ck,
    mq,
    mk,
    dropout_p,
    causal,
    seed,
    offset,
    *,
    scale=None,
):
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    b = bias.detach().requires_grad_(True) if bias is not None else None
    result, _ = _math(*leaves, b, causal, scale)
    inputs = leaves + ([b] if b is not None else [])
    grads = torch.autograd.grad(result, inputs, grad, allow_unused=True)
    grad_bias = grads[3] if b is not None else torch.empty(0, dtype=q.dtype)
    return grads[0], grads[1], grads[2], grad_bias


def _choice_samples(dtype: torch.dtype) -> list[Call]:
    return [
        Call("_fused_sdp_choice", c.args[:4], {"is_causal": c.args[5], "scale": c.kwargs["scale"]})
        for c in _forward_samples(dtype)
    ]


register(
    OpSpec(
        "_scaled_dot_product_fused_attention_overrideable",
        samples=_forward_samples,
        use_opinfo=False,
        reference=_forward_reference,
        compared_outputs=(0,),
        dtypes=FLOATS,
        value_sets=(),
        notes="reference: SDPA's math path; only the attention output is compared",
    )
)
register(
    OpSpec(
        "_scaled_dot_product_fused_attention_overrideable_backward",
        samples=_backward_samples,
        use_opinfo=False,
        reference=_backward_reference,
        compared_outputs=(0, 1, 2),
        dtypes=FLOATS,
        value_sets=(),
        notes="reference: autograd through SDPA's math path; grad of q, k, v compared",
    )
)
register(
    OpSpec(
        "_fused_sdp_choice",
        samples=_choice_samples,
        use_opinfo=False,
        check_values=False,
        dtypes=FLOATS,
        value_sets=(),
        notes="which kernel SDPA uses is the backend's choice: only that an int comes back",
    )
)
