"""echo_npu plus kernels at AutogradPrivateUse1, registered the way torch_npu registers its
`dropout` and `lstm` (issue 80): Python kernels at the autograd key, each with the backward the
vendor defines (dropout: a `torch.autograd.Function`; lstm: the cell's math over differentiable
device ops). They run for every tensor of the device, grad or not, before any PrivateUse1
kernel: discovery must list them and their op cases judge them.

`AUTOGRAD_NPU_FAULTS` (comma-separated, read at every call) plants:
- `dropout_unscaled`: kept values are not scaled by 1/(1-p);
- `dropout_keeps_more`: keeps with probability 1-p+0.02;
- `dropout_backward`: the gradient is 1 % too large (the forward is right);
- `lstm_swapped_gates`: the input and forget gates swapped;
- `group_norm_ignores_eps`: its `native_group_norm` (a PrivateUse1 kernel, computed on the host)
  normalises with eps = 0.
"""

import os
import warnings

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)


def _faults() -> set[str]:
    return set(filter(None, os.environ.get("AUTOGRAD_NPU_FAULTS", "").split(",")))


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        faults = _faults()
        keep = 1 - p + (0.02 if "dropout_keeps_more" in faults else 0.0)
        mask = torch.empty(x.shape, dtype=x.dtype, device=x.device).uniform_() < keep
        scale = 1.0 if "dropout_unscaled" in faults else 1.0 / (1.0 - p)
        ctx.save_for_backward(mask)
        ctx.scale = scale * (1.01 if "dropout_backward" in faults else 1.0)
        return x * mask * scale

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask * ctx.scale, None


def dropout(input, p, train):
    if not train or p == 0 or input.numel() == 0:
        return input
    if p == 1:
        return input * torch.zeros_like(input)
    return _Dropout.apply(input, p)


def _cell(x, h, c, w):
    w_ih, w_hh, b_ih, b_hh, w_hr = w
    gates = x @ w_ih.t() + h @ w_hh.t()
    if b_ih is not None:
        gates = gates + b_ih + b_hh
    i, f, g, o = gates.chunk(4, -1)
    if "lstm_swapped_gates" in _faults():
        i, f = f, i
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return (h @ w_hr.t() if w_hr is not None else h), c


def _weights(params, k, has_biases, proj):
    """(w_ih, w_hh, b_ih, b_hh, w_hr) of layer-direction `k`, Nones where absent."""
    per = (4 if has_biases else 2) + proj
    w = list(params[k * per : (k + 1) * per])
    biases = w[2:4] if has_biases else [None, None]
    return w[0], w[1], *biases, (w[-1] if proj else None)


def lstm(input, hx, params, has_biases, num_layers, dropout_p, train, bidirectional, batch_first):
    directions = 2 if bidirectional else 1
    proj = int(len(params) != (4 if has_biases else 2) * num_layers * directions)
    x = input.transpose(0, 1) if batch_first else input
    if x.shape[0] == 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    h0, c0 = hx
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            w = _weights(params, k, has_biases, proj)
            h, c = h0[k], c0[k]
            steps = range(x.shape[0] - 1, -1, -1) if d else range(x.shape[0])
            seq = [None] * x.shape[0]
            for t in steps:
                h, c = _cell(x[t], h, c, w)
                seq[t] = h
            outs.append(torch.stack(seq))
            hs.append(h)
            cs.append(c)
        x = torch.cat(outs, -1) if directions == 2 else outs[0]
        if dropout_p and train and layer < num_layers - 1:
            x = dropout(x, dropout_p, True)
    out = x.transpose(0, 1) if batch_first else x
    return out, torch.stack(hs), torch.stack(cs)


def native_group_norm(input, weight, bias, n, c, hxw, group, eps):
    eps = 0.0 if "group_norm_ignores_eps" in _faults() else eps
    host = [t.cpu() if t is not None else None for t in (input, weight, bias)]
    out = torch.ops.aten.native_group_norm(*host, n, c, hxw, group, eps)
    return tuple(t.to(input.device) for t in out)


_lib = torch.library.Library("aten", "IMPL", "AutogradPrivateUse1")
_device_lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("dropout", dropout)
    _lib.impl("lstm.input", lstm)
    _device_lib.impl("native_group_norm", native_group_norm)
