"""The law a module random in its mode owes, where torch defines one: the dropout modules in
training (`nn.Dropout`, `nn.Dropout1d/2d/3d`, `nn.AlphaDropout`, `nn.FeatureAlphaDropout`).
Their draws differ from CPU's, so their values are judged by what every draw must satisfy: each
element (each channel, for the feature variants) is either dropped (0; alpha dropout's
`a * alpha' + b`) or kept and scaled (`x / (1 - p)`; alpha dropout's `a * x + b`); the share kept
is within `Z` binomial standard deviations of `1 - p`; the input's gradient is the grad_output
masked and scaled the same way. A module random in its mode without such a law (attention or an
RNN with dropout between layers) is compared in dtype and shape only, and its record says so.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from conformance.engine.compare import Mismatch
from conformance.engine.draw_tests import Z

ALPHA = -1.7580993408473766  # SELU's -scale * alpha: where alpha dropout sends a dropped value


def has_law(module: torch.nn.Module) -> bool:
    """Whether the module's randomness has a law here (a dropout module with 0 < p < 1)."""
    return isinstance(module, torch.nn.modules.dropout._DropoutNd) and 0 < module.p < 1


def judge_law(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, grads: dict) -> str:
    """Raise Mismatch("output" or "grad") where the device's step breaks the module's law
    (`x`: the input on CPU; `y`: the device's output read back; `grads`: the input's gradient
    and the grad_output, read back); the record's note where it keeps it."""
    p = float(module.p)
    alpha = isinstance(module, torch.nn.AlphaDropout | torch.nn.FeatureAlphaDropout)
    feature = not isinstance(module, torch.nn.Dropout | torch.nn.AlphaDropout)
    x64, y64 = x.detach().to(torch.float64), y.to(torch.float64)
    if alpha:
        a = ((1 - p) * (1 + p * ALPHA * ALPHA)) ** -0.5
        b = -a * ALPHA * p
        kept_value, dropped_value = a * x64 + b, torch.full_like(x64, a * ALPHA + b)
    else:
        kept_value, dropped_value = x64 / (1 - p), torch.zeros_like(x64)
    eps = torch.finfo(y.dtype).eps if y.is_floating_point() else 0.0
    tol = 4 * eps * (1 + x64.abs() / (1 - p))
    kept = (y64 - kept_value).abs() <= tol
    dropped = (y64 - dropped_value).abs() <= tol
    neither = ~(kept | dropped)
    if bool(neither.any()):
        i = tuple(int(v) for v in neither.nonzero()[0])
        raise Mismatch(
            "output",
            f"output: {int(neither.sum())} of {y.numel()} values are neither dropped nor the "
            f"input kept and scaled (first at {list(i)}: {float(y64[i]):.6g}, kept would be "
            f"{float(kept_value[i]):.6g})",
        )
    if feature:  # one draw per (batch, channel): a channel is kept or dropped whole
        units = x.shape[:2] if x.dim() > 2 else x.shape[:1]
        unit_kept = kept.reshape(*units, -1).all(-1)
        unit_dropped = dropped.reshape(*units, -1).all(-1)
        if bool((~unit_kept & ~unit_dropped).any()):
            raise Mismatch("output", "output: a channel is partly dropped (one draw a channel)")
        spread = unit_kept.reshape(*units, *([1] * (x.dim() - len(units)))).expand(x.shape)
        told_units = unit_kept ^ unit_dropped
        n, share = int(told_units.sum()), float((unit_kept & told_units).sum())
        kept_at, told = spread, torch.ones_like(kept)
    else:
        told = kept ^ dropped  # where x makes both the same value, the element says nothing
        n, share = int(told.sum()), float((kept & told).sum())
        kept_at = kept & told
    sd = math.sqrt(n * p * (1 - p))
    if n and abs(share - n * (1 - p)) > Z * sd:
        raise Mismatch(
            "output",
            f"output: {share:.0f} of {n} kept, expected {n * (1 - p):.1f} (p = {p:g}, "
            f"z = {(share - n * (1 - p)) / sd:.1f}, limit {Z:g})",
        )
    grad, seed = grads.get("input 0"), grads.get("grad_output")
    if grad is not None and seed is not None:
        scale = a if alpha else 1 / (1 - p)
        want = seed.to(torch.float64) * kept_at * scale
        off = told & ((grad.to(torch.float64) - want).abs() > 4 * eps * (1 + want.abs()))
        if bool(off.any()):
            raise Mismatch(
                "grad",
                f"gradient of input 0: {int(off.sum())} of {grad.numel()} values are not the "
                "grad_output masked and scaled as the output was",
            )
    return f"random in this mode: judged by dropout's law (p = {p:g}; values, share kept, grad)"


__all__: list[Any] = ["has_law", "judge_law"]
