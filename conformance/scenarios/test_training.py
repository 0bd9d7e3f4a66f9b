"""Training scenarios: the small CNN and the tiny Qwen2 train a few steps on the device and on CPU.

Each step: forward, loss, backward, `clip_grad_norm_`, AdamW (torch's default implementation
for the device: foreach on an accelerator). Both sides start from the same weights and see the
same data; after each step the loss and every parameter's gradient (after clipping) are compared
with CPU's training, and every updated parameter with CPU's AdamW fed the device's own gradients
(a replay). Models are tiny and steps few: seconds per scenario.
"""

from __future__ import annotations

import copy
import importlib

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
# far more).
# Parameters are not compared with CPU's training: AdamW's update lr * m / (sqrt(v) + eps) is
# scale-invariant only where |gradient| >> eps (1e-8); a gradient near zero (a bias that barely
# moves the loss) moves its parameter by up to lr * 1e5 times its absolute error, so rounding
# within GRAD_TOL (atol 1e-6) could move it by any amount up to lr per step. The replay feeds
# CPU's AdamW (the implementation torch chose for the device: foreach or not) the device's own
# gradients, so only the optimizer's rounding separates the two: a few ulps of a parameter
# (float32, |p| < 1) per step, far inside atol 1e-7 with rtol 2e-6; weight decay alone moves a
# parameter by lr * 0.01 = 1e-5 of itself per step, and a kernel that skips it is caught.
LOSS_TOL = {"rtol": 1e-5, "atol": 1e-6}
GRAD_TOL = {"rtol": 1e-4, "atol": 1e-6}
PARAM_TOL = {"rtol": 2e-6, "atol": 1e-7}
LR, WEIGHT_DECAY = 1e-3, 0.01
MAX_NORM = 1.0


def _train(model: torch.nn.Module, batches: list, loss_of, device: torch.device) -> list:
    """Per step: (loss, {name: gradient}, {name: parameter}) after the step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
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


def _uses_foreach(params: list[torch.Tensor]) -> bool | None:
    """Whether torch's AdamW runs its foreach implementation for these parameters by default."""
    choose = getattr(
        importlib.import_module("torch.optim.optimizer"), "_default_to_fused_or_foreach", None
    )
    return None if choose is None else choose(params, False, False)[1]


def _replay(initial: torch.nn.Module, history: list, foreach: bool | None) -> list[dict]:
    """Per step: the parameters CPU's AdamW reaches when fed the device's gradients."""
    params = dict(initial.named_parameters())
    optimizer = torch.optim.AdamW(
        params.values(), lr=LR, weight_decay=WEIGHT_DECAY, foreach=foreach
    )
    owed = []
    for _, grads, _ in history:
        for n, p in params.items():
            p.grad = grads[n].cpu()
        optimizer.step()
        owed.append({n: p.detach().clone() for n, p in params.items()})
    return owed


def _compare(name: str, got: list, expected: list, owed: list) -> None:
    for i, ((loss, grads, params), (cpu_loss, cpu_grads, _), owed_params) in enumerate(
        zip(got, expected, owed, strict=True)
    ):
        where = f"{name} step {i + 1}"
        assert_same(loss, cpu_loss, f"{where}: loss", **LOSS_TOL)
        for n, g in cpu_grads.items():
            assert_same(grads[n], g, f"{where}: gradient of {n}", **GRAD_TOL)
        for n, p in owed_params.items():
            what = f"{where}: parameter {n} after AdamW (CPU's AdamW fed the device's gradients)"
            assert_same(params[n], p, what, **PARAM_TOL)


def _both(make_model, batches: list, loss_of, device: torch.device, name: str) -> None:
    """Train on CPU and on the device from the same weights; compare step by step."""
    cpu_model = make_model()
    initial = copy.deepcopy(cpu_model)
    dev_model = copy.deepcopy(cpu_model).to(device)
    foreach = _uses_foreach(list(dev_model.parameters()))
    expected = _train(cpu_model, batches, loss_of, torch.device("cpu"))
    got = _train(dev_model, batches, loss_of, device)
    _compare(name, got, expected, _replay(initial, got, foreach))


def _cnn_loss(model, x, target):
    return torch.nn.functional.cross_entropy(model(x), target)


def test_cnn_training(device: torch.device) -> None:
    """Conv, batch norm (training statistics), pooling, GELU, linear, cross-entropy."""
    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 4, (4,), generator=gen))
        for _ in range(STEPS)
    ]
    _both(lambda: small_cnn(dropout=False, conv_bias=False), batches, _cnn_loss, device, "CNN")


def _qwen_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def test_qwen2_training(device: torch.device) -> None:
    """Embedding, RMSNorm, rotary attention, SwiGLU, tied LM head, shifted cross-entropy."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    from conformance.engine.workload_models import tiny_qwen2

    gen = torch.Generator().manual_seed(2)
    batches = [(torch.randint(3, 64, (2, 8), generator=gen),) for _ in range(STEPS)]
    _both(lambda: tiny_qwen2().train(), batches, _qwen_loss, device, "Qwen2")
