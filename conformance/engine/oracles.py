"""Oracles for ops whose values CPU cannot simply dictate.

- Random ops (an overload with a `Generator?` argument, or listed in `NONDETERMINISTIC`): both
  sides run right after `torch.manual_seed(SEED)`. A backend that draws from the CPU generator
  (e.g. through cpu_fallback) then returns CPU's values exactly; otherwise the draws are judged by
  their properties: the same finite/NaN pattern, integral where CPU's are, and the same
  distribution (two-sample Kolmogorov-Smirnov test over the pooled draws, at a false-alarm rate
  of about 1e-6). Raw values are never required to match.
- Uninitialised outputs (`empty*`, parts of `_ctc_loss`): metadata only, declared in the op specs.
"""

from __future__ import annotations

import math

import torch

from conformance.engine.compare import ErrorStats, Mismatch, Scale, compare_values

SEED = 1234
#: random ops without a Generator argument in their schema
NONDETERMINISTIC = frozenset(
    {
        "native_dropout",
        "dropout",
        "feature_dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "rand_like",
        "randn_like",
        "randint_like",
    }
)
#: c(alpha) of the two-sample KS test for alpha ~ 1e-6: sqrt(-ln(alpha / 2) / 2)
KS_C = math.sqrt(-math.log(0.5e-6) / 2)


def is_nondeterministic(op: torch._ops.OpOverload) -> bool:
    """Whether the overload draws random numbers (from its schema)."""
    schema = op._schema
    if any("Generator" in str(a.type) for a in schema.arguments):
        return True
    return schema.name.split("::")[-1] in NONDETERMINISTIC


def seed() -> None:
    """Seed every generator torch knows (CPU, and the device's if its module offers it)."""
    torch.manual_seed(SEED)


def compare_random(
    name: str, actual: torch.Tensor, expected: torch.Tensor, tol_scale: Scale, stats: ErrorStats
) -> None:
    """`actual` (on CPU) equals CPU's draws, or has their properties (see module docstring)."""
    try:
        compare_values(name, actual, expected, tol_scale, stats)
        return
    except Mismatch:
        pass  # not the same stream: judge the distribution
    problem = distribution_problem(actual, expected)
    if problem:
        raise Mismatch("values", f"{name} (random draws): {problem}")


def distribution_problem(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Why `actual` cannot be draws of the distribution `expected` was drawn from, or None."""
    a, e = actual.reshape(-1), expected.reshape(-1)
    if a.numel() != e.numel():
        return f"{a.numel()} draws, cpu {e.numel()}"
    if a.numel() == 0:
        return None
    if a.dtype == torch.bool:
        a, e = a.to(torch.float64), e.to(torch.float64)
    if a.is_complex():
        a, e = torch.view_as_real(a).reshape(-1), torch.view_as_real(e).reshape(-1)
    a, e = a.to(torch.float64), e.to(torch.float64)
    for what, fn in (("NaN", torch.isnan), ("infinite", torch.isinf)):
        na, ne = int(fn(a).sum()), int(fn(e).sum())
        if (na == 0) != (ne == 0):
            return f"{na} {what} draws, cpu {ne}"
    a, e = a[torch.isfinite(a)], e[torch.isfinite(e)]
    if not a.numel() or not e.numel():
        return None
    if bool((e == e.round()).all()) and not bool((a == a.round()).all()):
        return "non-integral draws where cpu draws integers"
    stat = ks_statistic(a, e)
    limit = KS_C * math.sqrt((a.numel() + e.numel()) / (a.numel() * e.numel()))
    if stat > limit:
        return (
            f"not the distribution cpu draws from: Kolmogorov-Smirnov statistic {stat:.3f} > "
            f"{limit:.3f} over {a.numel()} draws (device mean {float(a.mean()):.4g}, "
            f"cpu {float(e.mean()):.4g}; device range [{float(a.min()):.4g}, "
            f"{float(a.max()):.4g}], cpu [{float(e.min()):.4g}, {float(e.max()):.4g}])"
        )
    return None


def ks_statistic(a: torch.Tensor, e: torch.Tensor) -> float:
    """max |F_a(x) - F_e(x)| over the pooled values (1-D float64 tensors)."""
    a, e = a.sort().values, e.sort().values
    pooled = torch.cat([a, e])
    fa = torch.searchsorted(a, pooled, right=True).to(torch.float64) / a.numel()
    fe = torch.searchsorted(e, pooled, right=True).to(torch.float64) / e.numel()
    return float((fa - fe).abs().max())
