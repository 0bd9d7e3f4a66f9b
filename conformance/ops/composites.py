"""Samples for the composite ops vendors register kernels for (at their autograd key, as
torch_npu does for `dropout` and `lstm`, or at their backend key): torch runs these as
CompositeImplicitAutograd decompositions on CPU, so OpInfo's captures (below autograd) never
record them. The CPU reference is CPU's own composite. Dropout's draws are random: its cases are
judged by the two-sample oracle and by its law (engine/parametric.py: the share kept, the kept
values scaled by 1/(1-p), the gradient masked and scaled the same way)."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register, seeded_randn

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
RNN_FLOATS = (torch.float32, torch.float64)
SEQ, BATCH, INPUT, HIDDEN = 3, 2, 4, 5


def _dropout_samples(overload: str):
    def samples(dtype: torch.dtype) -> list[Call]:
        if dtype not in FLOATS:
            return []
        x = seeded_randn((64, 64), dtype, 1)
        return [Call(overload, (x, p, train)) for p, train in ((0.3, True), (0.5, True))] + [
            Call(overload, (seeded_randn((4, 5), dtype, 2), 0.3, False))
        ]

    return samples


def _lstm_params(layers: int, directions: int, bias: bool, dtype: torch.dtype) -> list:
    params, seed = [], 10
    for layer in range(layers):
        width = INPUT if layer == 0 else HIDDEN * directions
        for _ in range(directions):
            shapes = [(4 * HIDDEN, width), (4 * HIDDEN, HIDDEN)]
            shapes += [(4 * HIDDEN,), (4 * HIDDEN,)] if bias else []
            for shape in shapes:
                params.append(seeded_randn(shape, dtype, seed) * 0.5)
                seed += 1
    return params


def _lstm_samples(dtype: torch.dtype) -> list[Call]:
    """lstm.input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
    batch_first): one layer with and without biases, two layers, bidirectional, batch first."""
    calls = []
    for layers, directions, bias, batch_first in (
        (1, 1, True, False),
        (1, 1, False, False),
        (2, 1, True, False),
        (1, 2, True, True),
    ):
        shape = (BATCH, SEQ, INPUT) if batch_first else (SEQ, BATCH, INPUT)
        state = (layers * directions, BATCH, HIDDEN)
        hx = [seeded_randn(state, dtype, 3), seeded_randn(state, dtype, 4)]
        params = _lstm_params(layers, directions, bias, dtype)
        args = (
            seeded_randn(shape, dtype, 5),
            hx,
            params,
            bias,
            layers,
            0.0,
            False,
            directions == 2,
        )
        calls.append(Call("lstm.input", (*args, batch_first)))
    return calls


for _overload in ("dropout", "native_dropout"):
    register(
        OpSpec(
            _overload,
            samples=_dropout_samples(_overload),
            use_opinfo=False,
            dtypes=FLOATS,
            nondeterministic=True,
            notes="random: the two-sample oracle and dropout's law (engine/parametric.py)",
        )
    )

register(
    OpSpec(
        "lstm.input",
        samples=_lstm_samples,
        use_opinfo=False,
        dtypes=RNN_FLOATS,
        value_sets=(),  # a recurrence over matrix products: no pointwise value set applies
        notes="CPU's own lstm (its composite over the cells) is the reference",
    )
)
