"""The last bits of the functions IEEE 754 only recommends correct rounding for (clause 9.2:
exp, log, pow, hypot, the trigonometric and hyperbolic functions, ...), in float32 and float64.

A tolerance cannot judge them: float32's atol of 1e-5 is millions of ulps for a log near 1, and
rtol 1.3e-6 is eleven ulps everywhere (issue 79: a `log` with a fast-math error bound passed
every case while up to 772 ulps off). No device is held to correct rounding either (issue 55:
an H200 is within its documentation a few ulps off). The bound is what CUDA documents for its
standard (non-fast-math) functions, `BOUNDS`, in ulps of the result: float32 against the
float64 truth rounded once, float64 against CPU's result (no wider truth; one ulp more for
CPU's own error). An element beyond its bound fails unless CPU's own result is as far from the
truth (a function CPU computes less accurately there), so CPU's bits always pass.
"""

from __future__ import annotations

import torch

from conformance.engine import exactness, ieee

#: op -> (float32 bound, float64 bound) in ulps: CUDA's maximum ulp error of the standard
#: function (CUDA C++ Programming Guide, "Mathematical Functions": single and double precision)
BOUNDS: dict[str, tuple[int, int]] = {
    "exp": (2, 1),
    "exp2": (2, 1),
    "expm1": (1, 1),
    "log": (1, 1),
    "log2": (1, 1),
    "log10": (2, 1),
    "log1p": (1, 1),
    "pow": (4, 2),
    "float_power": (4, 2),
    "hypot": (3, 2),
    "rsqrt": (2, 1),
    "sin": (2, 2),
    "cos": (2, 2),
    "tan": (4, 2),
    "asin": (2, 2),
    "acos": (2, 2),
    "atan": (2, 2),
    "atan2": (3, 2),
    "arctan2": (3, 2),
    "sinh": (3, 2),
    "cosh": (2, 1),
    "tanh": (2, 1),
    "asinh": (3, 3),
    "acosh": (4, 3),
    "atanh": (3, 2),
    "arcsin": (2, 2),
    "arccos": (2, 2),
    "arctan": (2, 2),
    "arcsinh": (3, 3),
    "arccosh": (4, 3),
    "arctanh": (3, 2),
    "erf": (2, 2),
    "erfc": (4, 5),
}
DTYPES = (torch.float32, torch.float64)


def bound(overload: str, dtype: torch.dtype) -> int | None:
    """The documented bound of the overload's function in `dtype`, or None (not judged here)."""
    if dtype not in DTYPES:
        return None
    name = ieee.base(overload).removeprefix(ieee.FOREACH)
    found = BOUNDS.get(name)
    return None if found is None else found[DTYPES.index(dtype)]


def beyond(a: torch.Tensor, cpu: torch.Tensor, truth: torch.Tensor, k: int) -> torch.Tensor:
    """Where the device's value `a` is more than `k` ulps from `truth` (the float64 result;
    for float64 CPU's own, and one ulp more) and farther than CPU's value; only where all three
    are finite (NaN and infinities are the values check's)."""
    if a.dtype == torch.float64:
        k += 1
    rounded = truth.to(a.dtype)
    finite = a.isfinite() & cpu.isfinite() & rounded.isfinite() & truth.isfinite()
    own = exactness.ulp_distance(a, rounded)
    cpus = exactness.ulp_distance(cpu, rounded)
    return finite & (own > k) & (own > cpus)
