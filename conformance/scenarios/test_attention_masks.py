"""Scenario 1: the transformers attention-mask pipeline, without transformers.

As in transformers' `_prepare_4d_causal_attention_mask` / `AttentionMaskConverter` and the SDPA
helpers: padding mask, causal mask from `tril`, combined with `unsqueeze`/`expand`,
`torch.full(min)` then `masked_fill_`, then `all`/`any` checks. The Qwen `generate` crash this
project grew from was a `masked_fill_` here corrupting the heap, seen later in `all`.
"""

from __future__ import annotations

import pytest
import torch

from conformance.scenarios._helpers import assert_same, step

# (batch, query length, past length, left padding per row)
CONFIGS = {
    "left_padded": (3, 6, 0, [0, 2, 5]),
    "no_padding": (2, 5, 0, [0, 0]),
    "with_past": (2, 3, 4, [1, 0]),
    "single_token": (2, 1, 6, [3, 0]),
    "empty_batch": (0, 4, 0, []),
}


def _padding_mask(batch, length, pads, device):
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    return mask.to(device)


def pipeline(device, batch, tgt, past, pads, dtype=torch.float32):
    """Every intermediate the transformers mask code builds, as a dict of tensors."""
    src = tgt + past
    min_value = torch.finfo(dtype).min
    out = {}
    step("padding mask to device")
    attention_mask = _padding_mask(batch, src, pads, device)
    out["lengths"] = step("sum.dim_IntList (sequence lengths)") or attention_mask.sum(dim=-1)
    out["no_padding"] = step("all (ignore-causal-mask check)") or torch.all(attention_mask == 1)

    # _make_causal_mask: full(min) then masked_fill_ with a tril/arange condition
    step("full + masked_fill_.Scalar (causal mask)")
    causal = torch.full((tgt, tgt), min_value, dtype=dtype, device=device)
    cond = torch.arange(tgt, device=device)
    causal.masked_fill_(cond < (cond + 1).view(tgt, 1), 0)
    if past > 0:
        step("cat (past key values)")
        causal = torch.cat([torch.zeros(tgt, past, dtype=dtype, device=device), causal], dim=-1)
    out["causal"] = causal
    step("tril (causal keep mask)")
    keep = torch.tril(torch.ones(tgt, src, dtype=torch.bool, device=device), diagonal=past)
    out["keep"] = keep
    causal_4d = causal[None, None, :, :].expand(batch, 1, tgt, src)

    # _expand_mask: padding mask to [bsz, 1, tgt, src], inverted, filled with min
    step("unsqueeze/expand + masked_fill (padding mask)")
    expanded = attention_mask[:, None, None, :].expand(batch, 1, tgt, src).to(dtype)
    inverted = 1.0 - expanded
    inverted = inverted.masked_fill(inverted.to(torch.bool), min_value)
    out["inverted"] = inverted
    step("masked_fill (combine causal and padding)")
    combined = causal_4d.masked_fill(inverted.bool(), min_value)
    out["combined"] = combined

    # SDPA path: boolean keep mask, where(), -inf from torch.full
    step("full(-inf) + masked_fill_ (sdpa float mask)")
    keep_4d = keep[None, None] & attention_mask[:, None, None, :].bool()
    sdpa = torch.full((batch, 1, tgt, src), float("-inf"), dtype=dtype, device=device)
    sdpa.masked_fill_(keep_4d, 0.0)
    out["sdpa"] = sdpa
    out["where"] = torch.where(keep_4d, torch.zeros((), dtype=dtype, device=device), sdpa)

    # the same mask built key-major and transposed to query-major (a non-contiguous self)
    step("masked_fill_.Scalar on a transposed view")
    key_major = torch.zeros(batch, src, tgt, dtype=dtype, device=device).transpose(1, 2)
    key_major.masked_fill_(~keep_4d[:, 0], min_value)
    out["masked_fill_.Scalar on a transposed view"] = key_major
    step("masked_fill_.Tensor on a sliced view")
    wide = torch.zeros(batch, tgt, src + 3, dtype=dtype, device=device)
    window = wide[:, :, 1 : src + 1]
    window.masked_fill_(~keep_4d[:, 0], torch.tensor(min_value, dtype=dtype, device=device))
    out["masked_fill_.Tensor on a sliced view"] = window
    out["buffer around the sliced view"] = wide

    # _unmask_unattended: rows that attend to nothing get unmasked
    step("all.dim / any (fully masked rows)")
    fully_masked = torch.all(combined == min_value, dim=-1, keepdim=True)
    out["fully_masked"] = fully_masked
    out["any_fully_masked"] = torch.any(fully_masked)
    out["unmasked"] = combined.mul(~fully_masked)
    out["all_finite"] = torch.all(sdpa.eq(0.0) | sdpa.lt(0.0))
    step("softmax over the masked scores")
    scores = torch.arange(batch * tgt * src, dtype=dtype, device=device).reshape(batch, 1, tgt, src)
    out["probs"] = torch.softmax(scores / 7.0 + out["unmasked"], dim=-1)
    return out


@pytest.mark.parametrize("config", list(CONFIGS))
def test_attention_mask_pipeline(device, config):
    batch, tgt, past, pads = CONFIGS[config]
    expected = pipeline(torch.device("cpu"), batch, tgt, past, pads)
    got = pipeline(device, batch, tgt, past, pads)
    for name, value in expected.items():
        assert_same(got[name], value, f"attention mask {config}: {name}")
