"""The statistics a large random draw is tested with: one draw of `DRAWS` values (a `Model`:
how to draw it, what it must look like), z-scores against a limit `Z` (a false alarm in about
1e6 per statistic), sample moments, category counts and uniform integers. The models are
engine/parametric.py's (distributions with parameters) and engine/random_laws.py's (laws)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

DRAWS = 1 << 17  # values in the one large draw
# multinomial: a category's count moves by its probability times a weight's change, a fraction
# of what a parameter moves a mean by; 4x the draws (indices: cheap) put a weight 5 % off at
# z = 8.4 instead of 5.9 (at 5.9, one draw in six missed it)
CATEGORY_DRAWS = 4 * DRAWS
Z = 5.0  # |z| beyond this is a failure (two-sided, ~5.7e-7 per statistic)


@dataclass(frozen=True)
class Model:
    """How to draw many values with a sample's parameters, and what they must look like."""

    describe: str  # e.g. "bernoulli p=0.3"
    # (op, device) -> draws (or a tuple of them: values, gradient, mask; None where absent)
    draw: Callable[[Any, torch.device | str], Any]
    test: Callable[[Any], str | None]  # float64 draws (as drawn) -> why they are wrong


def z_test(what: str, got: float, want: float, sd: float) -> str | None:
    z = (got - want) / sd if sd > 0 else 0.0
    if abs(z) <= Z:
        return None
    return f"{what} {got:.6g}, expected {want:.6g} (z = {z:.1f}, limit {Z:g})"


def moments_test(
    x: torch.Tensor, mean: float, var: float, mu4: float, name: str = ""
) -> str | None:
    """Sample mean and variance of `x` against a distribution's mean, variance and fourth
    central moment."""
    n = x.numel()
    problem = z_test(f"{name}mean", float(x.mean()), mean, math.sqrt(var / n))
    if problem:
        return problem
    return z_test(f"{name}variance", float(x.var()), var, math.sqrt(max(mu4 - var * var, 0) / n))


def categories_test(x: torch.Tensor, probs: torch.Tensor) -> str | None:
    """Draws of category indices against the probabilities: each category's count."""
    k = probs.numel()
    if not bool(((x >= 0) & (x < k) & (x == x.round())).all()):
        return f"draws outside the categories 0..{k - 1}"
    counts = torch.bincount(x.reshape(-1).to(torch.int64), minlength=k).to(torch.float64)
    n = x.numel()
    for i in range(k):
        p = float(probs[i])
        if p == 0 and counts[i]:
            return f"{int(counts[i])} draws of category {i}, whose weight is 0"
        problem = z_test(
            f"draws of category {i}", float(counts[i]), n * p, math.sqrt(n * p * (1 - p))
        )
        if problem:
            return problem
    return None


def integers_test(x: torch.Tensor, lo: int, hi: int) -> str | None:
    if not bool(((x >= lo) & (x < hi) & (x == x.round())).all()):
        return f"draws outside the integers of [{lo}, {hi})"
    k = hi - lo
    var = (k * k - 1) / 12
    mu4 = (k * k - 1) * (3 * k * k - 7) / 240  # discrete uniform on k values
    return moments_test(x - lo, (k - 1) / 2, var, mu4)
