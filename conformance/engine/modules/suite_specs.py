"""The suite's own module specs: modules models use every day that torch's `module_db` lacks, or
has without the arguments a vendor's fused kernels are reached by. Each is a ModuleInfo-like
spec (a name, the module class, dtypes, and a `module_inputs_func` giving torch's `ModuleInput`s)
judged exactly as module_db's are (engine/modules/judge.py); names that module_db has are left
to it. Listed in docs/MODULES.md; to add one, add a `SuiteModule` to `SPECS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class SuiteModule:
    """A module spec the suite adds (read as torch's ModuleInfo is)."""

    name: str
    module_cls: type
    # (args, kwargs) of the constructor, (args) of the forward: each a function of
    # (make_tensor with the case's dtype, and device and requires_grad set)
    inputs: tuple[tuple[tuple, dict, Callable[[Callable], tuple]], ...]
    dtypes: tuple[torch.dtype, ...] = FLOATS
    decorators: tuple = ()

    def module_inputs_func(self, info: Any, device: str, dtype: torch.dtype,
                           requires_grad: bool, training: bool, **_: Any) -> list[Any]:  # fmt: skip
        """The spec's samples, as torch's module_inputs_func gives them."""
        from torch.testing._internal.common_modules import FunctionInput, ModuleInput
        from torch.testing._internal.common_utils import make_tensor

        make = partial(make_tensor, device=device, dtype=dtype, requires_grad=requires_grad)
        return [
            ModuleInput(FunctionInput(*args, **kwargs), forward_input=FunctionInput(*forward(make)))
            for args, kwargs, forward in self.inputs
        ]


def _indices(rows: int, *shape: int, with_value: int | None = None) -> Callable:
    """A forward of long indices in [0, rows) (`with_value` in the first row, as padding)."""

    def forward(make: Callable) -> tuple:
        gen = torch.Generator().manual_seed(0)
        idx = torch.randint(0, rows, shape, generator=gen)
        if with_value is not None:
            idx.view(-1)[:: max(1, idx.numel() // 4)] = with_value
        return (idx.to(make.keywords["device"]),)

    return forward


def _shaped(*shape: int) -> Callable[[Callable], tuple]:
    return lambda make: (make(shape),)


SPECS = (
    SuiteModule("nn.Dropout", torch.nn.Dropout,
                (((0.3,), {}, _shaped(64, 64)), ((0.5,), {}, _shaped(8, 16, 32)))),
    SuiteModule("nn.Dropout1d", torch.nn.Dropout1d, (((0.3,), {}, _shaped(16, 32, 24)),)),
    SuiteModule("nn.Dropout2d", torch.nn.Dropout2d, (((0.3,), {}, _shaped(16, 32, 6, 6)),)),
    SuiteModule("nn.Dropout3d", torch.nn.Dropout3d, (((0.3,), {}, _shaped(8, 32, 3, 4, 4)),)),
    SuiteModule("nn.AlphaDropout", torch.nn.AlphaDropout, (((0.2,), {}, _shaped(64, 64)),)),
    SuiteModule("nn.FeatureAlphaDropout", torch.nn.FeatureAlphaDropout,
                (((0.2,), {}, _shaped(16, 32, 6, 6)),)),
    # grouped and depthwise convolutions: module_db builds none (a conv wrong for groups > 1)
    SuiteModule("nn.Conv2d.grouped", torch.nn.Conv2d, (
        ((8, 16, 3), {"groups": 4}, _shaped(2, 8, 9, 9)),
        ((8, 8, 3), {"groups": 8, "padding": 1}, _shaped(2, 8, 7, 7)),  # depthwise
    ), dtypes=(torch.float32, torch.float64)),
    SuiteModule("nn.Conv1d.grouped", torch.nn.Conv1d, (
        ((6, 12, 3), {"groups": 3}, _shaped(2, 6, 11)),
        ((6, 6, 5), {"groups": 6, "padding": 2}, _shaped(2, 6, 11)),  # depthwise
    ), dtypes=(torch.float32, torch.float64)),
    # embedding: padding_idx's row gets no gradient; max_norm renormalises rows in place
    SuiteModule("nn.Embedding.padding_max_norm", torch.nn.Embedding, (
        ((10, 6), {"padding_idx": 2}, _indices(10, 4, 5, with_value=2)),
        ((10, 6), {"max_norm": 1.0}, _indices(10, 4, 5)),
    ), dtypes=(torch.float32, torch.float64)),
    # attention and the fused RNN paths with dropout: random in training (no law: dtype and
    # shape there), compared in eval
    SuiteModule("nn.MultiheadAttention.dropout", torch.nn.MultiheadAttention, (
        ((16, 4), {"dropout": 0.2, "batch_first": True},
         lambda make: (make((2, 5, 16)), make((2, 5, 16)), make((2, 5, 16)))),
    ), dtypes=(torch.float32, torch.float64)),
    SuiteModule("nn.LSTM.dropout", torch.nn.LSTM, (
        ((4, 5), {"num_layers": 2, "dropout": 0.3}, _shaped(3, 2, 4)),
    ), dtypes=(torch.float32, torch.float64)),
    SuiteModule("nn.GRU.dropout", torch.nn.GRU, (
        ((4, 5), {"num_layers": 2, "dropout": 0.3}, _shaped(3, 2, 4)),
    ), dtypes=(torch.float32, torch.float64)),
)  # fmt: skip
