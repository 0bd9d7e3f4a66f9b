"""Optimizer kernels OpInfo has no samples for: `_foreach_add_.Tensor` and the fused optimizers.

The `_foreach_*` ops otherwise take OpInfo's samples (its foreach databases, read by
samples/opinfo.py), but none of them reaches `_foreach_add_.Tensor` (a 0-dim tensor added
to every tensor of a list: how `torch.optim` steps tensor step counters). `_fused_sgd_`,
`_fused_adam_` and `_fused_adamw_` (and their `tensor_lr` overloads) are what `torch.optim` with
`fused=True` calls on an accelerator; OpInfo has no entry for them. Their samples mirror what an
optimizer passes: parameter, gradient and state lists of a few shapes (one empty), with the
options each optimizer exposes. Every list argument is written in place (the schema's `(a!)[]`),
so the runner compares every tensor of every list after the call.
"""

from __future__ import annotations

import torch
from torch.testing import make_tensor

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register

# the shapes of one parameter list: a weight, a bias, a scalar parameter and an empty one
SHAPES = ((4, 3), (5,), (), (0, 2))
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
NUMERIC = (*FLOATS, torch.int32, torch.int64)


def _tensors(dtype: torch.dtype, low: float | None = None, seed: int = 0) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    return [make_tensor(s, dtype=dtype, device="cpu", low=low, high=None) for s in SHAPES]


def _foreach_add_tensor(dtype: torch.dtype) -> list[Call]:
    other = make_tensor((), dtype=dtype, device="cpu")
    alpha = 2 if not dtype.is_floating_point else 0.5
    return [
        Call("_foreach_add_.Tensor", (_tensors(dtype), other)),
        Call("_foreach_add_.Tensor", (_tensors(dtype, seed=1), other), {"alpha": alpha}),
        # the optimizer's step counters: float32 scalars, one each, plus 1
        Call("_foreach_add_.Tensor", ([torch.tensor(3.0)] * 1, torch.tensor(1.0))),
    ]


def _lr(lr: float, tensor_lr: bool) -> float | torch.Tensor:
    return torch.tensor(lr) if tensor_lr else lr


def _fused_sgd(overload: str, tensor_lr: bool):
    def samples(dtype: torch.dtype) -> list[Call]:
        calls = []
        options = [
            # (weight_decay, momentum, dampening, nesterov, maximize, is_first_step)
            (0.0, 0.0, 0.0, False, False, False),  # plain SGD: no momentum buffers read
            (0.0, 0.9, 0.0, False, False, True),  # the first step copies the gradient
            (0.0, 0.9, 0.0, False, False, False),
            (0.01, 0.9, 0.1, False, True, False),
            (0.01, 0.9, 0.0, True, False, False),
        ]
        for i, (wd, momentum, dampening, nesterov, maximize, first) in enumerate(options):
            kwargs = {
                "weight_decay": wd,
                "momentum": momentum,
                "lr": _lr(0.1, tensor_lr),
                "dampening": dampening,
                "nesterov": nesterov,
                "maximize": maximize,
                "is_first_step": first,
            }
            bufs = _tensors(dtype, seed=3 * i + 2) if momentum else []
            args = (_tensors(dtype, seed=3 * i), _tensors(dtype, seed=3 * i + 1), bufs)
            calls.append(Call(overload, args, kwargs))
        return calls

    return samples


def _fused_adam(overload: str, tensor_lr: bool):
    def samples(dtype: torch.dtype) -> list[Call]:
        calls = []
        # (weight_decay, amsgrad, maximize)
        for i, (wd, amsgrad, maximize) in enumerate(
            [(0.0, False, False), (0.01, False, False), (0.01, True, False), (0.0, True, True)]
        ):
            seed = 5 * i
            steps = [torch.tensor(float(i + 2)) for _ in SHAPES]  # float32 step counters
            args = (
                _tensors(dtype, seed=seed),
                _tensors(dtype, seed=seed + 1),
                _tensors(dtype, seed=seed + 2),
                _tensors(dtype, low=0.0, seed=seed + 3),  # squares: never negative
                _tensors(dtype, low=0.0, seed=seed + 4) if amsgrad else [],
                steps,
            )
            kwargs = {
                "lr": _lr(0.01, tensor_lr),
                "beta1": 0.9,
                "beta2": 0.999,
                "weight_decay": wd,
                "eps": 1e-8,
                "amsgrad": amsgrad,
                "maximize": maximize,
            }
            calls.append(Call(overload, args, kwargs))
        return calls

    return samples


register(
    OpSpec(
        "_foreach_add_.Tensor",
        samples=_foreach_add_tensor,
        use_opinfo=False,
        dtypes=NUMERIC,
        notes="no OpInfo sample adds a 0-dim tensor to a list",
    )
)
for _names, _build, _notes in (
    (("_fused_sgd_", "_fused_sgd_.tensor_lr"), _fused_sgd, "torch.optim.SGD(fused=True)"),
    (
        ("_fused_adam_", "_fused_adam_.tensor_lr", "_fused_adamw_", "_fused_adamw_.tensor_lr"),
        _fused_adam,
        "torch.optim.Adam/AdamW(fused=True)",
    ),
):
    for _name in _names:
        register(
            OpSpec(
                _name,
                samples=_build(_name, _name.endswith("tensor_lr")),
                use_opinfo=False,
                dtypes=FLOATS,
                value_sets=(),
                notes=_notes,
            )
        )
