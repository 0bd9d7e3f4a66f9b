"""The fused RNN cells (`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell`) and their backward
kernels: what torch's LSTMCell/GRUCell (aten/src/ATen/native/RNN.cpp) call on a CUDA, XPU or
PrivateUse1 input. CPU has none of them, so OpInfo cannot capture them: samples are written here
and the CPU reference is the cells' math (as CUDA's kernels compute it, aten/src/ATen/native/
cuda/RNN.cu). The forward's workspace is the backend's own business (compared_outputs leaves it
out); the backward kernels are handed a workspace laid out as CUDA's kernels lay it out (LSTM:
the activated gates i, f, g, o; GRU: r, z, n, hx and the hidden part of n's gate with its bias):
a backend with a layout of its own declares their cases, its -grad cases of the forward judge
its backward anyway."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register, seeded_randn

#: 256 elements per hidden output: enough for their errors' sides to be judged
#: (engine/error_balance.py), a few kernels' worth of work
BATCH, HIDDEN = 8, 32
FLOATS = (torch.float32, torch.float64)


def _gates(factor: int, dtype: torch.dtype, bias: bool) -> tuple:
    width = factor * HIDDEN
    gates = (seeded_randn((BATCH, width), dtype, 1), seeded_randn((BATCH, width), dtype, 2))
    cell = seeded_randn((BATCH, HIDDEN), dtype, 3)
    if not bias:
        return (*gates, cell)
    return (*gates, cell, seeded_randn((width,), dtype, 4), seeded_randn((width,), dtype, 5))


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    # the workspace is not differentiable (derivatives.yaml): the backward reads it
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1).detach()


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    gcx = grad_cy if grad_cy is not None else torch.zeros_like(cx)
    go = torch.zeros_like(o)
    if grad_hy is not None:
        gcx = gcx + grad_hy * o * (1 - tanh_cy * tanh_cy)
        go = grad_hy * tanh_cy * o * (1 - o)
    grad = torch.cat([gcx * g * i * (1 - i), gcx * cx * f * (1 - f), gcx * i * (1 - g * g), go], 1)
    return grad, gcx * f, grad.sum(0) if has_bias else None


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1).detach()


def gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    gz = grad_hy * (hx - n) * z * (1 - z)
    gn = grad_hy * (1 - z) * (1 - n * n)
    gr = gn * hn * r * (1 - r)
    grad_input, grad_hidden = torch.cat([gr, gz, gn], 1), torch.cat([gr, gz, gn * r], 1)
    sums = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return grad_input, grad_hidden, grad_hy * z, *sums


def _lstm_samples(dtype: torch.dtype) -> list[Call]:
    return [Call("_thnn_fused_lstm_cell", _gates(4, dtype, bias)) for bias in (True, False)]


def _lstm_backward_samples(dtype: torch.dtype) -> list[Call]:
    calls = []
    for bias in (True, False):
        args = _gates(4, dtype, bias)
        _, cy, workspace = lstm_cell(*args)
        grad_hy, grad_cy = (
            seeded_randn((BATCH, HIDDEN), dtype, 6),
            seeded_randn((BATCH, HIDDEN), dtype, 7),
        )
        cx = args[2]
        calls.append(
            Call(
                "_thnn_fused_lstm_cell_backward_impl",
                (grad_hy, grad_cy if bias else None, cx, cy, workspace, bias),
            )
        )
    return calls


def _gru_samples(dtype: torch.dtype) -> list[Call]:
    return [Call("_thnn_fused_gru_cell", _gates(3, dtype, bias)) for bias in (True, False)]


def _gru_backward_samples(dtype: torch.dtype) -> list[Call]:
    calls = []
    for bias in (True, False):
        _, workspace = gru_cell(*_gates(3, dtype, bias))
        grad_hy = seeded_randn((BATCH, HIDDEN), dtype, 6)
        calls.append(Call("_thnn_fused_gru_cell_backward", (grad_hy, workspace, bias)))
    return calls


# Tolerance: the base of each dtype (a few pointwise ops per element, as the cells' kernels)
for overload, samples, reference, compared in (
    ("_thnn_fused_lstm_cell", _lstm_samples, lstm_cell, (0, 1)),
    ("_thnn_fused_lstm_cell_backward_impl", _lstm_backward_samples, lstm_cell_backward, None),
    ("_thnn_fused_gru_cell", _gru_samples, gru_cell, (0,)),
    ("_thnn_fused_gru_cell_backward", _gru_backward_samples, gru_cell_backward, None),
):
    register(
        OpSpec(
            overload,
            samples=samples,
            use_opinfo=False,
            reference=reference,
            dtypes=FLOATS,
            compared_outputs=compared,
            elementwise=True,  # per (batch, hidden) element; a bias gradient sums the batch
            # the forward's -grad cases run the backward kernel on the forward's workspace
            grad_reference=overload in ("_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"),
        )
    )
