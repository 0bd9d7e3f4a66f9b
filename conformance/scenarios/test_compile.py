"""Scenario 6: torch.compile(backend="aot_eager") on the device matches eager."""

from __future__ import annotations

import pytest
import torch

from conformance.scenarios._helpers import assert_same, step


def pointwise(x, y):
    return torch.relu(x * 2.0 + y) - y.abs() / 3.0


def masked_softmax(scores, keep):
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)


def causal_block_mask(attention_mask, block):
    """Causal block mask from positions (as in flex attention's block masks), with padding."""
    q = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    causal = (q[:, None] // block) >= (q[None, :] // block)
    keep = causal[None, :, :] & attention_mask[:, None, :].bool()
    bias = torch.full(keep.shape, float("-inf"), device=attention_mask.device)
    bias = bias.masked_fill(keep, 0.0)
    return keep, bias, keep.any(dim=-1).all()


def reduce_rows(x):
    return x.sum(dim=-1), x.mean(dim=0), x.amax(dim=1), torch.exp(x).sum()


def _inputs(name, device):
    torch.manual_seed(0)
    if name == "pointwise":
        args = (torch.randn(4, 6), torch.randn(4, 6))
    elif name == "masked_softmax":
        args = (torch.randn(2, 5, 5), torch.tril(torch.ones(5, 5, dtype=torch.bool)))
    elif name == "causal_block_mask":
        args = (torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]]), 2)
    else:
        args = (torch.randn(3, 7),)
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


FUNCTIONS = {
    "pointwise": pointwise,
    "masked_softmax": masked_softmax,
    "causal_block_mask": causal_block_mask,
    "reduce_rows": reduce_rows,
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_compile_aot_eager_matches_eager(device, name):
    fn = FUNCTIONS[name]
    torch._dynamo.reset()
    expected = fn(*_inputs(name, torch.device("cpu")))
    step(f"eager {name} on the device")
    eager = fn(*_inputs(name, device))
    assert_same(eager, expected, f"eager {name}: device vs CPU")
    step(f"torch.compile(aot_eager) {name} on the device")
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    got = compiled(*_inputs(name, device))
    assert_same(got, expected, f"torch.compile(aot_eager) {name}: device vs CPU eager")
    torch._dynamo.reset()
