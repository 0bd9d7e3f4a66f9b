"""Sums, means and scans: the error any order of accumulation can make, per result element.

A sum's order of accumulation is the kernel's choice (sequential, pairwise, a tree of blocks, a
decoupled look-back scan), so no rule of correct rounding holds for its result. What does hold,
for every order, is the classic bound (Higham, Accuracy and Stability of Numerical Algorithms,
Lemma 3.1 and section 4.2): any binary tree of n - 1 additions in a precision with unit
roundoff u is within gamma(n - 1) sum|x_i| of the exact sum, gamma(k) = k u / (1 - k u). Two
bounds are kept here, one per use:

- `rigorous_excess` (the `rounding` check, engine/bits.py): where a float32 or float64 element
  of `sum`, `nansum`, `mean`, `nanmean` or `cumsum` is farther from the truth than any order of
  accumulation allows. float32: from the float64 truth, by gamma(n - 1) sum|x| at float32's u,
  plus half an ulp (a kernel that accumulates wider rounds once at the end) and the truth's own
  gamma at float64's u; float64: from CPU's result, by twice gamma(n - 1) sum|x| (CPU's error
  and the device's). A mean adds two roundings of its result where n is not a power of two
  (sum / n, or sum x (1 / n) as CUDA's MeanOps does). An element of one term must be its input
  (issue 79: `cumsum=ulp:1` and `sum.dim_IntList=ulp:4@float64` passed every case, the bound
  being a tolerance of eleven ulps, or the probabilistic bound's five roundings at n = 1).
  Matrix products (`mm`, `bmm`, `mv`, `dot`) likewise, each element a dot product of k terms:
  gamma(k) sum|a_i b_i|, fused multiply-adds or not; a product of one term is the rounded
  product. Not for convolutions: cuDNN's Winograd and FFT algorithms and TF32 (on by default
  for cuDNN, off for cuBLAS's float32 matmul) are not a tree of additions.
- `probable_bound` (the -sizes cases' evidence, engine/evidence.py): lambda sqrt(n) u sum|x|,
  which any order exceeds with a probability below 2 exp(-lambda^2 / 2) (Higham & Mary 2019):
  at 65,537 terms the rigorous bound is a quarter of a percent, the probable one a thousandth of
  that.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from conformance.engine import ieee
from conformance.engine.siblings import functional_of

#: sums whose order of accumulation is the kernel's choice: op -> whether it divides by n
SUMS = {"sum": False, "nansum": False, "cumsum": False, "mean": True, "nanmean": True}
#: matrix products: each element a dot product of k terms, each term a rounded product (or a
#: fused multiply-add), summed in any order: gamma(k) sum|a_i b_i| (Higham, section 3.1)
PRODUCTS = frozenset({"mm", "bmm", "mv", "dot", "vdot"})
#: the probabilistic bound's factor (an error beyond lambda sqrt(n) u sum|x| has a probability
#: below 2 exp(-lambda^2 / 2), 7e-6 at 5)
LAMBDA = 5.0
#: results judged by the rigorous bound (half precision rounds once at the end: its own rules)
DTYPES = (torch.float32, torch.float64)


@functools.cache
def accumulates(overload: str) -> bool:
    return bool(overload) and (ieee.base(overload) in SUMS or ieee.base(overload) in PRODUCTS)


def magnitudes(op: Any, overload: str, args: tuple, kwargs: dict) -> tuple | None:
    """(op(|x|), number of terms) per result element, in float64, of a sum, mean, scan or
    matrix product (every floating operand made |a|, and 1 for the count) whose float64 call
    is `args`/`kwargs` (its out= arguments left out; an in-place form run as its functional
    sibling); None for any other op or where the call fails. For a mean, op(|x|) is mean|x|:
    the accumulated error scaled by 1 / n as the result is."""
    name = ieee.base(overload) if overload else ""
    if not accumulates(overload) or not args or not isinstance(args[0], torch.Tensor):
        return None
    x, rest = args[0], args[1:]
    if not x.is_floating_point():
        return None
    functional = functional_of(overload) or op
    schema = getattr(functional, "_schema", None)
    names = {a.name for a in schema.arguments} if schema is not None else set(kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k in names}
    if name in PRODUCTS:  # every operand: |a| x |b|, and the number of terms: 1 x 1
        rest = tuple(_wide(r, torch.abs) for r in rest)
        ones = tuple(_wide(r, torch.ones_like) for r in args[1:])
    else:
        ones = args[1:]
    try:
        total = functional(x.detach().abs().to(torch.float64), *rest, **kwargs)
        terms = functional(torch.ones_like(x, dtype=torch.float64), *ones, **kwargs)
    except Exception:  # noqa: BLE001 - no bound: the other rules stand
        return None
    if not isinstance(total, torch.Tensor) or not isinstance(terms, torch.Tensor):
        return None
    total, terms = total.to(torch.float64), terms.to(torch.float64)
    if SUMS.get(name, False):  # a mean of ones is one: its terms are the elements it averages
        terms = torch.full_like(terms, x.numel() / max(terms.numel(), 1))
    return total, terms


def probable_bound(magnitude: torch.Tensor, terms: torch.Tensor, result: torch.dtype):
    """lambda sqrt(n) u sum|x| per element, u of the precision a kernel accumulates `result` in
    (float32 for float32 and half precision, float64 for float64)."""
    return LAMBDA * terms.sqrt() * _unit(result) * magnitude.abs()


def gamma(k: torch.Tensor, u: float) -> torch.Tensor:
    """gamma(k) = k u / (1 - k u); inf where k u >= 1."""
    ku = k.clamp(min=0) * u
    return torch.where(ku < 1, ku / (1 - ku).clamp(min=1e-300), torch.full_like(ku, torch.inf))


def rigorous_excess(
    overload: str,
    got: torch.Tensor,
    basis: torch.Tensor,
    magnitude: torch.Tensor,
    terms: torch.Tensor,
    flushes: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(where `got` is beyond what any order of accumulation allows, that allowance) per
    element; an element of at most one rounding is the correctly rounded one. `basis`: the
    float64 truth (a float32 result) or CPU's result (float64);
    `magnitude`, `terms`: `magnitudes`; `flushes`: the device declares it flushes subnormal
    results (each partial sum may lose up to the least normal value). Only finite elements are
    judged."""
    dtype = got.dtype
    got64, basis64 = got.to(torch.float64), basis.to(torch.float64)
    u, wide = _unit(dtype), _unit(torch.float64)
    mean = SUMS.get(ieee.base(overload), False)
    if mean:  # a running mean (Welford's) rounds at each term at up to the largest |x|
        magnitude = magnitude * terms
    roundings = terms if ieee.base(overload) in PRODUCTS else terms - 1  # products: k, sums: n-1
    accumulated = gamma(roundings, u) * magnitude.abs()
    # one rounding at most (a sum of two terms, a product of one): the result is the rounded
    # exact value whatever the kernel (float32, fused, or wider and rounded once); not a mean,
    # whose running form rounds more
    once = (roundings <= 1) if not mean else torch.zeros_like(roundings, dtype=torch.bool)
    if dtype == torch.float64:  # cpu's result is that rounded value too
        allowed = torch.where(once, 0.0, 2 * accumulated)
    else:  # accumulated in float32, or wider and rounded once; and the truth's own error
        half = half_ulp(basis64, dtype)
        allowed = torch.where(once, half, accumulated + half)
        allowed = allowed + gamma(roundings, wide) * magnitude.abs()
    if mean:  # sum / n, or sum x (1 / n): two roundings; a division below the normal range
        exact_division = _power_of_two(terms)  # errs by up to half the least subnormal
        allowed = allowed + torch.where(exact_division, 0.0, 2 * u * basis64.abs())
        allowed = allowed + terms * _least(dtype)
    if flushes:
        allowed = allowed + terms * torch.finfo(dtype).smallest_normal
    finite = got64.isfinite() & basis64.isfinite() & allowed.isfinite()
    return finite & ((got64 - basis64).abs() > allowed), allowed


def half_ulp(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half the spacing of `dtype` at each float64 `value` (the error of rounding it once)."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(value)  # value in [2^(e-1), 2^e): its ulp is eps 2^(e-1)
    half = torch.ldexp(torch.full_like(value, info.eps), exponent - 2)
    least = _least(dtype) / 2  # subnormals and zero: the least ulp
    return torch.where(value == 0, least, half.clamp(min=least))


def _wide(value: Any, how: Any) -> Any:
    """A floating tensor operand as `how` makes it (abs, ones), in float64; anything else as is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return how(value.detach().to(torch.float64))
    return value


def _least(dtype: torch.dtype) -> float:
    """The least subnormal value of `dtype`."""
    info = torch.finfo(dtype)
    return info.eps * info.smallest_normal


def _power_of_two(n: torch.Tensor) -> torch.Tensor:
    mantissa, _ = torch.frexp(n)
    return mantissa == 0.5


def _unit(result: torch.dtype) -> float:
    return torch.finfo(torch.float64 if result == torch.float64 else torch.float32).eps / 2
