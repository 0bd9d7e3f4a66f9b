"""Oracles for ops whose values CPU cannot simply dictate.

- Random ops (an overload with a `Generator?` argument, or listed in `NONDETERMINISTIC`): both
  sides run right after seeding CPU's and the device's generators with `SEED` (what
  torch.manual_seed(SEED) seeds for the device under test: `Backend.seed_generators`). A
  backend that draws from the CPU generator (e.g. through cpu_fallback) then returns CPU's
  values exactly. Otherwise the draws are judged by their properties, on at least `MIN_DRAWS`
  draws per side: a smaller sample is run again on both sides after seeding with `SEED + 1`,
  `SEED + 2`, ... (the same seed on both sides, at most `MAX_REPEATS` more times) and the
  draws of each output or written argument are pooled. The pooled draws must have the same
  finite/NaN pattern, be integral where CPU's are, take no value CPU never takes (where CPU's
  draws are few integers: bernoulli's {0, 1}, randint's range) nor fall beyond CPU's extremes,
  in both cases more often than chance allows, and have the same distribution (two-sample
  Kolmogorov-Smirnov test). Each test has a false-alarm rate of about `ALPHA`. Raw values are
  never required to match.
- Uninitialised outputs (`empty*`, parts of `_ctc_loss`): metadata only, declared in the op specs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

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
#: false-alarm rate of each test on the draws (a correct backend fails one in ~1e6 judgements)
ALPHA = 1e-6
#: c(alpha) of the two-sample KS test: sqrt(-ln(alpha / 2) / 2); the limit on the statistic is
#: KS_C * sqrt(2 / n) for n draws per side: 0.084 at 2048, 0.24 at 256, above 1 below 15
KS_C = math.sqrt(-math.log(ALPHA / 2) / 2)
#: draws per side before the distribution is judged (fewer: the sample is drawn again)
MIN_DRAWS = 2048
#: at most this many further runs of one sample (a 1-element sample is judged on 257 draws)
MAX_REPEATS = 256
#: CPU's draws with at most this many distinct integral values are a value set to check
MAX_VALUES = 64

#: (device draws read back to CPU, CPU's draws) of one further run of a sample
Draws = tuple[torch.Tensor, torch.Tensor]


@functools.cache
def is_nondeterministic(op: torch._ops.OpOverload) -> bool:
    """Whether the overload draws random numbers (from its schema; asked for every case: kept
    per overload)."""
    schema = op._schema
    if any("Generator" in str(a.type) for a in schema.arguments):
        return True
    return schema.name.split("::")[-1] in NONDETERMINISTIC


class Seeding:
    """How this process seeds random work: the runner sets the backend's `seed_generators`
    (the CPU's generator and the device's, a lazy runtime's own: what torch.manual_seed seeds
    for the device under test, and no other device's); None: torch.manual_seed itself."""

    fn: Callable[[int], None] | None = None


def use_seeding(fn: Callable[[int], None] | None) -> None:
    Seeding.fn = fn


def seed(draw: int = 0) -> None:
    """Seed the CPU's and the device's generators with `SEED + draw` (`draw` > 0: a further
    run of a random sample)."""
    seed_value(SEED + draw)


def seed_value(value: int) -> None:
    """Seed the CPU's and the device's generators (`Seeding`) with `value`."""
    (Seeding.fn or torch.manual_seed)(value)


def compare_random(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    tol_scale: Scale,
    stats: ErrorStats,
    more: Iterable[Draws] = (),
) -> None:
    """`actual` (on CPU) equals CPU's draws, or has their properties (see module docstring).

    `more` yields the draws of further runs of the same sample (seeds SEED + 1, SEED + 2, ...);
    it is consumed only when the draws differ, until `MIN_DRAWS` per side or `MAX_REPEATS`."""
    try:
        compare_values(name, actual, expected, tol_scale, stats)
        return
    except Mismatch as exc:
        if exc.check == "shape":
            raise  # draws of another shape: no distribution makes that right
        # not the same stream: judge the distribution
    a, e, repeats = pool(actual, expected, more)
    problem = distribution_problem(a, e)
    if problem:
        runs = f", {repeats + 1} runs with seeds {SEED}..{SEED + repeats}" if repeats else ""
        raise Mismatch("values", f"{name} (random draws{runs}): {problem}")


def pool(
    actual: torch.Tensor, expected: torch.Tensor, more: Iterable[Draws]
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(device draws, CPU's draws, further runs used): both flattened, with the draws of `more`
    appended until each side has `MIN_DRAWS` or `MAX_REPEATS` runs were added."""
    a_parts, e_parts = [actual.reshape(-1)], [expected.reshape(-1)]
    n = actual.numel()
    repeats = 0
    if n == 0 or n != expected.numel():
        return a_parts[0], e_parts[0], 0  # nothing to pool, or a count that is wrong already
    draws = iter(more)
    while n < MIN_DRAWS and repeats < MAX_REPEATS:
        pair = next(draws, None)
        if pair is None:
            break
        a, e = pair
        a_parts.append(a.reshape(-1).to(actual.dtype))
        e_parts.append(e.reshape(-1).to(expected.dtype))
        n += a.numel()
        repeats += 1
    return torch.cat(a_parts), torch.cat(e_parts), repeats


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
    problem = value_set_problem(a, e) or range_problem(a, e)
    if problem:
        return problem
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


def value_set_problem(a: torch.Tensor, e: torch.Tensor) -> str | None:
    """A value CPU never drew, drawn too often to be chance (1-D finite float64 draws), where
    CPU's draws take at most `MAX_VALUES` integral values (bernoulli's {0, 1}, randint's range).

    If both sides drew from one distribution, the c draws of a value would all fall on the
    device's side with probability `one_sided(c, n, m)` (about 2^-c for n = m): a tail value
    drawn once or twice by one side only is chance, one drawn dozens of times is not."""
    values = torch.unique(e)
    if values.numel() > MAX_VALUES or not bool((values == values.round()).all()):
        return None
    drawn, counts = torch.unique(a, return_counts=True)
    new = ~torch.isin(drawn, values)
    if not bool(new.any()):
        return None
    tests = values.numel() + int(new.sum())  # one per value either side drew
    count, i = counts[new].max(0)
    if tests * one_sided(int(count), a.numel(), e.numel()) > ALPHA:
        return None
    return (
        f"device drew {_number(drawn[new][i])} ({int(count)} of {a.numel()} draws), a value "
        f"cpu never drew in {e.numel()} draws (cpu's values: {_value_set(values)})"
    )


def range_problem(a: torch.Tensor, e: torch.Tensor) -> str | None:
    """Draws above CPU's largest or below its smallest, too many to be chance (1-D finite
    float64 draws): c of them would all be the device's with probability `one_sided(c, n, m)`."""
    n, m = a.numel(), e.numel()
    lo, hi = float(e.min()), float(e.max())
    for where, beyond, bound in (("above", a > hi, hi), ("below", a < lo, lo)):
        count = int(beyond.sum())
        if count and 2 * one_sided(count, n, m) <= ALPHA:
            extreme = "largest" if where == "above" else "smallest"
            return (
                f"{count} of {n} device draws {where} {_number(bound)}, the {extreme} of cpu's "
                f"{m} draws (device range [{_number(a.min())}, {_number(a.max())}])"
            )
    return None


def one_sided(count: int, n: int, m: int) -> float:
    """C(n, count) / C(n + m, count): the chance that `count` given draws of the n + m pooled
    ones are all among the n device draws when both sides draw from one distribution."""
    if count > n:
        return 0.0
    return math.exp(sum(math.log((n - i) / (n + m - i)) for i in range(count)))


def _number(x: torch.Tensor | float) -> str:
    v = float(x)
    return str(int(v)) if v == round(v) and abs(v) < 2**53 else f"{v:.4g}"


def _value_set(values: torch.Tensor) -> str:
    """Sorted integral values: '0..9' when consecutive, else listed (at most 12)."""
    v = [int(x) for x in values.tolist()]
    if len(v) > 2 and v[-1] - v[0] == len(v) - 1:
        return f"{v[0]}..{v[-1]}"
    shown = ", ".join(str(x) for x in v[:12])
    return shown + (f", ... ({len(v)} values)" if len(v) > 12 else "")


def ks_statistic(a: torch.Tensor, e: torch.Tensor) -> float:
    """max |F_a(x) - F_e(x)| over the pooled values (1-D float64 tensors)."""
    a, e = a.sort().values, e.sort().values
    pooled = torch.cat([a, e])
    fa = torch.searchsorted(a, pooled, right=True).to(torch.float64) / a.numel()
    fe = torch.searchsorted(e, pooled, right=True).to(torch.float64) / e.numel()
    return float((fa - fe).abs().max())
