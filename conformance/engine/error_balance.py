"""Round-to-nearest errs both ways: the last bits of float32 and float64 results judged as a
distribution, where no rule judges them element by element.

A tolerance cannot see a kernel a few ulps off on every element: float32's atol of 1e-5 is a
hundred ulps below 1, and a composite such as a fused LSTM cell (a few roundings of sigmoid,
tanh, products and sums per element) has no per-element ulp bound a correct kernel keeps (at a
cancellation its error is many ulps of its tiny result). Over a sample it leaves a trace: every
rounding to nearest errs either way, so a kernel's errors against the correctly rounded result
(float32: the op on the inputs in float64, rounded once; float64: CPU's result, no wider truth)
fall on both sides of it. Where `MIN_OFF` or more elements are off, a share beyond `SHARE` of
them on one side (away from zero, or toward it) with a z-score beyond `Z` against a fair coin
is not that (issue 79: the fused cells 4 and 64 ulps off passed every case). Only for ops whose
output elements are computed each from its own inputs (torch's `pointwise` tag, a foreach op
of a pointwise one, an op spec's `elementwise`): a shared sum or normaliser (softmax's, a
norm's) moves every element the same way in a correct kernel. CPU is the control:
where its own errors on the sample lean as far the same way (it rounds a Python float scalar
to float32 first, and so does the device), nothing is claimed. Only where every element is
within the tolerance (a wrong value is the outputs check's), for ops CPU is not measured exact
for (those are held to CPU's bits), not for a dtype the manifest declares computed in itself
(precision.py judges that rounding).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from conformance.engine import ieee, truth

#: elements off the correctly rounded result before their sides say anything
MIN_OFF = 64
#: the share beyond one half on one side that is not chance nor a harmless lean
SHARE = 0.25
#: the z-score of that share against a fair coin (a false alarm in about 1e9)
Z = 6.0
#: CPU's own off elements needed for it to serve as the control
MIN_CONTROL = 16
DTYPES = (torch.float32, torch.float64)


def one_way(s: Any, name: str, got: torch.Tensor, cpu: torch.Tensor) -> str | None:
    """Why the device's values `got` of `name` (all within the tolerance) cannot come from
    rounding to nearest, or None."""
    if cpu.dtype not in DTYPES or got.shape != cpu.shape or got.dtype != cpu.dtype:
        return None
    independent = ieee.pointwise(s.overload) or ieee.per_tensor_pointwise(s.overload)
    if not (independent or s.spec.elementwise):
        return None
    if cpu.dtype == torch.float64:
        rounded, basis = cpu, "cpu's float64 result"
    else:
        wide = truth.float64_value(s, cpu.dtype, name)
        if wide is None or wide.shape != cpu.shape:
            return None
        rounded, basis = wide.to(cpu.dtype), "the correctly rounded result"
    judged = got.isfinite() & rounded.isfinite() & (rounded != 0)
    device = _lean(got, rounded, judged, MIN_OFF)
    if device is None:
        return None
    share, n = device
    if abs(share - 0.5) < SHARE or abs(share - 0.5) * 2 * math.sqrt(n) < Z:
        return None
    control = "" if cpu.dtype == torch.float64 else _control(cpu, rounded, judged, share)
    if control is None:
        return None
    way = "away from zero" if share > 0.5 else "toward zero"
    most = max(share, 1 - share)
    return (
        f"{name}: {most:.0%} of the {n} elements that are not {basis} are off {way}{control}: "
        f"a kernel that rounds to nearest errs both ways (engine/error_balance.py)"
    )


def _lean(
    values: torch.Tensor, rounded: torch.Tensor, judged: torch.Tensor, minimum: int
) -> tuple[float, int] | None:
    """(share of the off elements away from zero, their count), or None: fewer than `minimum`
    off."""
    off = judged & (values != rounded)
    n = int(off.sum())
    if n < minimum:
        return None
    away = (values.to(torch.float64).abs() > rounded.to(torch.float64).abs())[off]
    return float(away.to(torch.float64).mean()), n


def _control(
    cpu: torch.Tensor, rounded: torch.Tensor, judged: torch.Tensor, share: float
) -> str | None:
    """CPU's lean, to say beside the device's; None where CPU leans as far the same way."""
    control = _lean(cpu, rounded, judged, MIN_CONTROL)
    if control is None:
        return " (cpu: within its own rounding on nearly every element)"
    cpu_share, m = control
    if abs(share - cpu_share) < SHARE:
        return None
    return f" (cpu: {cpu_share:.0%} of its {m} away from zero)"
