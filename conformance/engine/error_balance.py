"""Round-to-nearest errs both ways: the last bits of float32 and float64 results judged as a
distribution, where no rule judges them element by element.

A tolerance cannot see a kernel a few ulps off on every element: float32's atol of 1e-5 is a
hundred ulps below 1, and a composite such as a fused LSTM cell (a few roundings of sigmoid,
tanh, products and sums per element) has no per-element ulp bound a correct kernel keeps (at a
cancellation its error is many ulps of its tiny result). Over a sample it leaves a trace: every
rounding to nearest errs either way, so a kernel's errors against the correctly rounded result
(float32: the op on the inputs in float64, rounded once; float64: CPU's result, no wider truth)
fall on both sides of it. An element counts as off at `OFF_ULPS` or more from it (one ulp is
any correct kernel's, and a constant rounded once leans a whole function by up to one: CUDA's
log10f is logf times log10(e)). Where `MIN_OFF` or more elements, and `MOST` of them, are off,
a share beyond `SHARE` of them on one side (away from zero, or toward it) with a z-score beyond
`Z` against a fair coin is not that (issue 79: the fused cells 4 and 64 ulps off passed every
case). CPU is the control: where its own errors lean as far the same way, nothing is claimed.

Only for ops whose output elements are computed each from its own inputs (torch's `pointwise`
tag, a foreach op of a pointwise one, an op spec's `elementwise`): a shared sum or normaliser
(softmax's, a norm's) moves every element the same way in a correct kernel. Not for the
functions with a documented ulp bound (engine/ulp_bounds.py judges each element), nor for ops
CPU is measured exact for (held to CPU's bits), nor for a dtype the manifest declares computed
in itself (precision.py judges that rounding); only where every element is within the
tolerance (a wrong value is the outputs check's). Errors large and of either sign are the
tolerance's to judge, not this rule's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from conformance.engine import exactness, ieee, truth, ulp_bounds

#: elements off the correctly rounded result before their sides say anything
MIN_OFF = 64
#: ulps from the basis an element must be to count as off: a correct kernel's own roundings
#: (and a constant rounded once, as log10 = log x log10(e) does) stay within one
OFF_ULPS = 2
#: the share beyond one half on one side that is not chance nor a harmless lean
SHARE = 0.25
#: the share of the judged elements that must be off: a fast exp (exp2 of x times log2(e)
#: rounded, as NPUs' and __expf compute it) leans a sigmoid on the 8 % of elements it puts
#: 2+ ulps off; a kernel off on most elements one way is not such a function
MOST = 0.5
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
    if not (independent or s.spec.elementwise) or ulp_bounds.bound(s.overload, cpu.dtype):
        return None  # elements not independent; or a function with its own ulp bound
    if cpu.dtype == torch.float64:
        rounded, basis = cpu, "cpu's float64 result"
    else:
        wide = truth.float64_value(s, cpu.dtype, name)
        if wide is None or wide.shape != cpu.shape:
            return None
        rounded, basis = wide.to(cpu.dtype), "the correctly rounded result"
    judged = got.isfinite() & rounded.isfinite() & (rounded != 0)
    device = _lean(got, rounded, judged, max(MIN_OFF, math.ceil(MOST * int(judged.sum()))))
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
    off (`OFF_ULPS` or more from `rounded`)."""
    off = judged & (exactness.ulp_distance(values, rounded) >= OFF_ULPS)
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
