"""Optimizer conformance: `torch.optim` steps and gradient clipping on the device against CPU.

SGD (momentum, nesterov, weight decay), Adam and AdamW (weight decay, amsgrad), each in every
implementation torch offers: the for-loop (`foreach=False`), `foreach=True` (`_foreach_*` ops:
torch's default on an accelerator) and `fused=True` (`_fused_sgd_`, `_fused_adam(w)_`). An
implementation torch does not enable for the device type (`torch.utils._foreach_utils`) is not
applicable there, and says so. The same parameters and gradients go through a few steps on CPU
(same implementation: CPU runs all three) and on the device; every parameter and every optimizer
state tensor is compared after each step. The test id names optimizer, options and
implementation.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _foreach_utils

from conformance.scenarios._helpers import assert_same, step

SHAPES = ((4, 3), (5,), (), (2, 3, 2))  # a weight, a bias, a scalar and a 3-D parameter
STEPS = 3
# float32, a few steps of elementwise arithmetic that each side rounds correctly: the two differ
# only by operation order or fused multiply-adds (a few ulps of values of order 1), so
# torch.testing's float32 defaults (rtol 1.3e-6, atol 1e-5) hold with room; a wrong momentum,
# a skipped parameter or a wrong bias correction is off by percents.
TOL = {"rtol": 1.3e-6, "atol": 1e-5}

OPTIMIZERS = [
    pytest.param(torch.optim.SGD, {"lr": 0.1}, id="SGD-plain"),
    pytest.param(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, id="SGD-momentum"),
    pytest.param(
        torch.optim.SGD,
        {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
        id="SGD-nesterov-weight_decay",
    ),
    pytest.param(
        torch.optim.SGD,
        {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "maximize": True},
        id="SGD-dampening-maximize",
    ),
    pytest.param(torch.optim.Adam, {"lr": 0.01}, id="Adam-plain"),
    pytest.param(
        torch.optim.Adam,
        {"lr": 0.01, "weight_decay": 0.01, "amsgrad": True},
        id="Adam-weight_decay-amsgrad",
    ),
    pytest.param(torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}, id="AdamW-weight_decay"),
    pytest.param(
        torch.optim.AdamW,
        {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True},
        id="AdamW-weight_decay-amsgrad",
    ),
]
IMPLEMENTATIONS = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {}}


def implementation_options(name: str, device: torch.device) -> dict:
    """The optimizer keywords of an implementation; skips when torch does not enable it for
    the device type (it would raise or silently fall back to another implementation)."""
    if name == "foreach":
        supported = _foreach_utils._get_foreach_kernels_supported_devices()
    elif name == "fused":
        supported = _foreach_utils._get_fused_kernels_supported_devices()
    else:
        return dict(IMPLEMENTATIONS[name])
    if device.type not in supported:
        pytest.skip(f"not applicable: torch enables no {name} optimizers for '{device.type}'")
    return {"fused": True} if name == "fused" else dict(IMPLEMENTATIONS[name])


def _parameters(device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(s, generator=gen).to(device).requires_grad_()
        for s in SHAPES  # the same values on both sides
    ]


def _gradients(step_index: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step_index)
    return [torch.randn(s, generator=gen) for s in SHAPES]


def _run(cls, options: dict, device: torch.device) -> list:
    """Per step: (parameters, {parameter index: {state name: value}}) after the step."""
    params = _parameters(device)
    optimizer = cls(params, **options)
    history = []
    for i in range(STEPS):
        for p, g in zip(params, _gradients(i), strict=True):
            p.grad = g.to(device)
        optimizer.step()
        state = {
            j: {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
            for j, p in enumerate(params)
            if (s := optimizer.state.get(p))
        }
        history.append(([p.detach().clone() for p in params], state))
    return history


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("cls, options", OPTIMIZERS)
def test_optimizer_step(cls, options: dict, implementation: str, device: torch.device) -> None:
    """Parameters and optimizer state after each of a few steps equal CPU's."""
    options = {**options, **implementation_options(implementation, device)}
    name = f"{cls.__name__}({', '.join(f'{k}={v}' for k, v in options.items())})"
    step(f"{name}: CPU")
    expected = _run(cls, options, torch.device("cpu"))
    step(f"{name}: {device}")
    got = _run(cls, options, device)
    for i, ((params, state), (cpu_params, cpu_state)) in enumerate(zip(got, expected, strict=True)):
        for j, (p, c) in enumerate(zip(params, cpu_params, strict=True)):
            assert_same(p, c, f"{name} step {i + 1}: parameter {j} {list(c.shape)}", **TOL)
        assert state.keys() == cpu_state.keys(), (
            f"{name} step {i + 1}: state for parameters {sorted(state)} != CPU {sorted(cpu_state)}"
        )
        for j, entries in cpu_state.items():
            assert state[j].keys() == entries.keys(), (
                f"{name} step {i + 1}: parameter {j} state {sorted(state[j])} != CPU "
                f"{sorted(entries)}"
            )
            for key, value in entries.items():
                assert_same(
                    state[j][key], value, f"{name} step {i + 1}: {key} of parameter {j}", **TOL
                )


def _skip_unless_foreach(foreach: bool, device: torch.device) -> None:
    if foreach and device.type not in _foreach_utils._get_foreach_kernels_supported_devices():
        pytest.skip(f"not applicable: torch enables no foreach kernels for '{device.type}'")


def _clip_inputs(device: torch.device) -> list[torch.Tensor]:
    params = _parameters(device)
    for p, g in zip(params, _gradients(0), strict=True):
        p.grad = (3.0 * g).to(device)  # a total norm well above max_norm: clipping scales
    return params


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
@pytest.mark.parametrize("norm_type", [2.0, float("inf")], ids=["norm2", "norminf"])
def test_clip_grad_norm(norm_type: float, foreach: bool, device: torch.device) -> None:
    """clip_grad_norm_: the returned total norm and every clipped gradient equal CPU's."""
    _skip_unless_foreach(foreach, device)
    name = f"clip_grad_norm_(max_norm=1.0, norm_type={norm_type}, foreach={foreach})"
    results = {}
    for where in (torch.device("cpu"), device):
        step(f"{name} on {where}")
        params = _clip_inputs(where)
        total = torch.nn.utils.clip_grad_norm_(params, 1.0, norm_type=norm_type, foreach=foreach)
        results[where.type] = (total, [p.grad for p in params])
    (total, grads), (cpu_total, cpu_grads) = results[device.type], results["cpu"]
    # a norm sums squares of 30 values: float32 rounding of the sum, far below 1e-5 relative
    assert_same(total, cpu_total, f"{name}: total norm", **TOL)
    for j, (g, c) in enumerate(zip(grads, cpu_grads, strict=True)):
        assert_same(g, c, f"{name}: gradient {j}", **TOL)


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
def test_clip_grad_value(foreach: bool, device: torch.device) -> None:
    """clip_grad_value_ clamps every gradient exactly as on CPU (no rounding: equal bits)."""
    _skip_unless_foreach(foreach, device)
    name = f"clip_grad_value_(clip_value=0.5, foreach={foreach})"
    results = {}
    for where in (torch.device("cpu"), device):
        step(f"{name} on {where}")
        params = _clip_inputs(where)
        torch.nn.utils.clip_grad_value_(params, 0.5, foreach=foreach)
        results[where.type] = [p.grad for p in params]
    for j, (g, c) in enumerate(zip(results[device.type], results["cpu"], strict=True)):
        assert_same(g, c, f"{name}: gradient {j}", atol=0, rtol=0)
