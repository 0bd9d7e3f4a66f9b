"""Training scenarios: the small CNN and the tiny Qwen2 train a few steps on the device and on CPU.

Each step: forward, loss, backward, `clip_grad_norm_`, AdamW (torch's default implementation
for the device: foreach on an accelerator). Both sides start from the same weights and see the
same data; the loss, every parameter's gradient (after clipping) and every updated parameter are
compared after each step. Models are tiny and steps few: seconds per scenario.
"""

from __future__ import annotations

import copy

import pytest
import torch

from conformance.engine.workload_models import small_cnn
from conformance.scenarios._helpers import assert_same, step

STEPS = 3
# Tolerances (float32). The loss is a mean over a batch: rounding of sums in another order
# (convolutions and matmuls accumulate over up to 72 / 64 products) stays within 1e-5
# relative. Gradients sum the same products over the batch and the spatial positions, so a
# kernel that accumulates in another order (blocked, tree) differs by a few ulps of the largest
# term: rtol 1e-4 with atol 1e-6 (gradients are of order 1e-3..1, a wrong backward is off by
# far more). Parameters: AdamW's update is lr * m / (sqrt(v) + eps), invariant to the scale of
# the gradient, so a gradient within 1e-4 relative moves a parameter by at most lr * 1e-4 =
# 1e-7 per step: atol 1e-6 over three steps, rtol 1e-5 for the weight decay term.
LOSS_TOL = {"rtol": 1e-5, "atol": 1e-6}
GRAD_TOL = {"rtol": 1e-4, "atol": 1e-6}
PARAM_TOL = {"rtol": 1e-5, "atol": 1e-6}
MAX_NORM = 1.0


def _train(model: torch.nn.Module, batches: list, loss_of, device: torch.device) -> list:
    """Per step: (loss, {name: gradient}, {name: parameter}) after the step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    history = []
    for i, batch in enumerate(batches):
        step(f"training step {i + 1} on {device}: forward, backward, clip, AdamW")
        optimizer.zero_grad()
        loss = loss_of(model, *(t.to(device) for t in batch))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        optimizer.step()
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        history.append((loss.detach(), grads, params))
    return history


def _compare(name: str, got: list, expected: list) -> None:
    for i, ((loss, grads, params), (cpu_loss, cpu_grads, cpu_params)) in enumerate(
        zip(got, expected, strict=True)
    ):
        where = f"{name} step {i + 1}"
        assert_same(loss, cpu_loss, f"{where}: loss", **LOSS_TOL)
        for n, g in cpu_grads.items():
            assert_same(grads[n], g, f"{where}: gradient of {n}", **GRAD_TOL)
        for n, p in cpu_params.items():
            assert_same(params[n], p, f"{where}: parameter {n} after AdamW", **PARAM_TOL)


def _both(make_model, batches: list, loss_of, device: torch.device) -> tuple[list, list]:
    cpu_model = make_model()
    dev_model = copy.deepcopy(cpu_model).to(device)
    expected = _train(cpu_model, batches, loss_of, torch.device("cpu"))
    got = _train(dev_model, batches, loss_of, device)
    return got, expected


def _cnn_loss(model, x, target):
    return torch.nn.functional.cross_entropy(model(x), target)


def test_cnn_training(device: torch.device) -> None:
    """Conv, batch norm (training statistics), pooling, GELU, linear, cross-entropy."""
    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 4, (4,), generator=gen))
        for _ in range(STEPS)
    ]
    got, expected = _both(
        lambda: small_cnn(dropout=False, conv_bias=False), batches, _cnn_loss, device
    )
    _compare("CNN", got, expected)


def _qwen_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def test_qwen2_training(device: torch.device) -> None:
    """Embedding, RMSNorm, rotary attention, SwiGLU, tied LM head, shifted cross-entropy."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    from conformance.engine.workload_models import tiny_qwen2

    gen = torch.Generator().manual_seed(2)
    batches = [(torch.randint(3, 64, (2, 8), generator=gen),) for _ in range(STEPS)]
    got, expected = _both(lambda: tiny_qwen2().train(), batches, _qwen_loss, device)
    _compare("Qwen2", got, expected)
