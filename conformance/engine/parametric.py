"""Random ops with known parameters: one large draw tested against the distribution itself.

The two-sample oracle (`oracles.py`) compares the device's draws with CPU's on a few thousand
draws: it cannot see a bernoulli p off by 0.05 or a normal std off by 10 %. Where the
distribution's parameters are in the call (bernoulli p, normal mean/std, uniform bounds,
exponential lambda, geometric p, log-normal mean/std, random_ bounds, multinomial weights with
replacement), the device draws `DRAWS` values in one call of the same overload with the same
parameters, and the sample mean and variance (of the draws, or of their standardised residuals;
for multinomial, each category's count) are tested against the parameters: each statistic's
z-score must stay within `Z` (a false alarm in about 1e6 each).
At 131,072 draws that catches bernoulli p +- 0.02, normal mean +- 0.05 sigma and std +- 3 %,
uniform bounds, exponential lambda and geometric p +- 3 %, a multinomial weight +- 5 %
(`python -m conformance.measure.power`, docs/POWER.md). CPU draws the same large sample first
and must pass the same test: where it does not (a dtype too coarse for the model), nothing is
claimed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from conformance.engine.transfer import read_back

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
    draw: Callable[[Any, torch.device | str], torch.Tensor]  # (op, device) -> draws
    test: Callable[[torch.Tensor], str | None]  # float64 draws -> why they are wrong


def _z(what: str, got: float, want: float, sd: float) -> str | None:
    z = (got - want) / sd if sd > 0 else 0.0
    if abs(z) <= Z:
        return None
    return f"{what} {got:.6g}, expected {want:.6g} (z = {z:.1f}, limit {Z:g})"


def _moments(x: torch.Tensor, mean: float, var: float, mu4: float, name: str = "") -> str | None:
    """Sample mean and variance of `x` against a distribution's mean, variance and fourth
    central moment."""
    n = x.numel()
    problem = _z(f"{name}mean", float(x.mean()), mean, math.sqrt(var / n))
    if problem:
        return problem
    return _z(f"{name}variance", float(x.var()), var, math.sqrt(max(mu4 - var * var, 0) / n))


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def _args(call: Any, names: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by schema name (positional, keyword, default)."""
    out = dict(defaults)
    out.update(zip(names, call.args, strict=False))
    out.update(call.kwargs)
    return out


def _buffer(self: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    return torch.empty(DRAWS, dtype=self.dtype, device=device)


def model_of(overload: str, call: Any) -> Model | None:
    """The model of one sample of `overload` (named as a run names it: `normal_`, the default
    overload without its `.default`), if its parameters are known (else None)."""
    overload = overload.removesuffix(".default")
    a, kw = call.args, call.kwargs
    self = a[0] if a and isinstance(a[0], torch.Tensor) else None
    if self is None or (not self.is_floating_point() and not overload.startswith("random_")):
        return None
    if overload in ("bernoulli_.float", "bernoulli.p"):
        p = _scalar(_args(call, ["self", "p"], {"p": 0.5})["p"])
        if p is None or not 0 < p < 1:
            return None

        def draw(op: Any, dev: torch.device | str, p: float = p) -> torch.Tensor:
            return op(_buffer(self, dev), p)

        return Model(f"bernoulli p={p:g}", draw, lambda x, p=p: _bernoulli(x, p))
    if overload == "bernoulli.default" and self.is_floating_point() and self.numel():
        probs = self.reshape(-1).to(torch.float64)
        if not bool(((probs > 0) & (probs < 1)).any()):
            return None
        reps = -(-DRAWS // probs.numel())
        tiled = probs.repeat(reps)

        def draw_tiled(op: Any, dev: torch.device | str) -> torch.Tensor:
            return op(tiled.to(self.dtype).to(dev))

        return Model(
            f"bernoulli of {probs.numel()} probabilities, tiled",
            draw_tiled,
            lambda x: _bernoulli(x, tiled.to(self.dtype).to(torch.float64)),
        )
    if overload in ("normal_", "log_normal_"):
        log = overload.startswith("log")
        p = _args(call, ["self", "mean", "std"], {"mean": 1.0, "std": 2.0} if log else {})
        mean, std = _scalar(p.get("mean", 0.0)), _scalar(p.get("std", 1.0))
        if mean is None or std is None or std <= 0:
            return None

        def standard(x: torch.Tensor, mean: float = mean, std: float = std) -> str | None:
            if log:  # the log of a log-normal draw is normal
                return _positive(x) or _moments((x.log() - mean) / std, 0, 1, 3, "log ")
            return _moments((x - mean) / std, 0.0, 1.0, 3.0, "standardised ")

        return Model(
            f"{'log-normal' if log else 'normal'} mean={mean:g} std={std:g}",
            lambda op, dev: op(_buffer(self, dev), mean, std),
            standard,
        )
    if overload == "uniform_":
        p = _args(call, ["self", "from", "to"], {"from": 0.0, "to": 1.0})
        lo, hi = _scalar(p["from"]), _scalar(p["to"])
        if lo is None or hi is None or not hi > lo:
            return None
        return Model(
            f"uniform [{lo:g}, {hi:g})",
            lambda op, dev: op(_buffer(self, dev), lo, hi),
            lambda x: _uniform(x, lo, hi),
        )
    if overload == "exponential_":
        lam = _scalar(_args(call, ["self", "lambd"], {"lambd": 1.0})["lambd"])
        if lam is None or lam <= 0:
            return None
        return Model(
            f"exponential lambda={lam:g}",
            lambda op, dev: op(_buffer(self, dev), lam),
            lambda x: _positive(x, 0.0) or _moments(x * lam, 1.0, 1.0, 9.0, "scaled "),
        )
    if overload == "geometric_":
        p = _scalar(_args(call, ["self", "p"], {})["p"]) if len(a) > 1 or "p" in kw else None
        if p is None or not 0 < p < 1:
            return None
        return Model(
            f"geometric p={p:g}",
            lambda op, dev: op(_buffer(self, dev), p),
            lambda x: _geometric(x, p),
        )
    if overload == "multinomial":
        p = _args(call, ["self", "num_samples", "replacement"], {"replacement": False})
        if self.dim() not in (1, 2) or not self.numel() or p["replacement"] is not True:
            return None  # without replacement the draws of a row are not independent
        weights = self.reshape(-1, self.shape[-1])[0].to(torch.float64)
        if not bool((weights >= 0).all()) or float(weights.sum()) <= 0:
            return None
        row = self.reshape(-1, self.shape[-1])[:1]
        return Model(
            f"multinomial with replacement, weights {[round(float(w), 4) for w in weights]}",
            lambda op, dev: op(row.to(dev), CATEGORY_DRAWS, True),
            lambda x: _categories(x, weights / weights.sum()),
        )
    if overload in ("random_.from", "random_.to"):
        names = ["self", "from", "to"] if overload == "random_.from" else ["self", "to"]
        p = _args(call, names, {"from": 0})
        lo, hi = p.get("from"), p.get("to")
        if not isinstance(lo, int) or not isinstance(hi, int) or hi - lo < 2:
            return None
        digits = (
            round(-math.log2(torch.finfo(self.dtype).eps)) + 1 if self.is_floating_point() else 0
        )
        if digits and max(abs(lo), abs(hi)) > 2**digits:  # integers the dtype cannot hold
            return None
        args = (lo, hi) if overload == "random_.from" else (hi,)
        return Model(
            f"random integers in [{lo}, {hi})",
            lambda op, dev: op(_buffer(self, dev), *args),
            lambda x: _integers(x, lo, hi),
        )
    return None


def _bernoulli(x: torch.Tensor, p: float | torch.Tensor) -> str | None:
    if not bool(((x == 0) | (x == 1)).all()):
        return "draws other than 0 and 1"
    p_t = torch.as_tensor(p, dtype=torch.float64).expand_as(x)
    sd = math.sqrt(float((p_t * (1 - p_t)).sum()))
    return _z("number of ones", float(x.sum()), float(p_t.sum()), sd)


def _positive(x: torch.Tensor, floor: float | None = None) -> str | None:
    bad = int((x < 0).sum()) if floor is not None else int((x <= 0).sum())
    return f"{bad} draws below the support" if bad else None


def _uniform(x: torch.Tensor, lo: float, hi: float) -> str | None:
    outside = int(((x < lo) | (x > hi)).sum())
    if outside:
        return f"{outside} draws outside [{lo:g}, {hi:g}]"
    u = (x - lo) / (hi - lo)
    return _moments(u, 0.5, 1 / 12, 1 / 80, "scaled ")


def _geometric(x: torch.Tensor, p: float) -> str | None:
    if not bool(((x >= 1) & (x == x.round())).all()):
        return "draws other than positive integers"
    q = 1 - p
    var = q / p**2
    mu4 = q * (p * p + 9 * q) / p**4  # fourth central moment of the geometric distribution
    return _moments(x, 1 / p, var, mu4)


def _categories(x: torch.Tensor, probs: torch.Tensor) -> str | None:
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
        problem = _z(f"draws of category {i}", float(counts[i]), n * p, math.sqrt(n * p * (1 - p)))
        if problem:
            return problem
    return None


def _integers(x: torch.Tensor, lo: int, hi: int) -> str | None:
    if not bool(((x >= lo) & (x < hi) & (x == x.round())).all()):
        return f"draws outside the integers of [{lo}, {hi})"
    k = hi - lo
    var = (k * k - 1) / 12
    mu4 = (k * k - 1) * (3 * k * k - 7) / 240  # discrete uniform on k values
    return _moments(x - lo, (k - 1) / 2, var, mu4)


def check(
    op: Any, overload: str, calls: list[Any], device: torch.device | str, run: Callable
) -> str | None:
    """Why the device's large draw contradicts the parameters of the first sample that has a
    model (None: it agrees, or no sample has a model, or CPU's own large draw does not fit the
    model). `run(fn)` runs a device call the way the case runs it (its path's routing)."""
    for call in calls:
        model = model_of(overload, call)
        if model is None:
            continue
        try:
            cpu = model.draw(op, "cpu").to(torch.float64).reshape(-1)
        except Exception:  # noqa: BLE001 - the op does not take these parameters this way
            return None
        if model.test(cpu) is not None:
            return None  # the model does not fit CPU's own draws in this dtype: no claim
        drawn = run(lambda model=model: model.draw(op, device))
        if not isinstance(drawn, torch.Tensor):
            return None  # the device raised: the ordinary samples judged that
        values = read_back(drawn.detach()).to(torch.float64).reshape(-1)
        problem = model.test(values)
        if problem is None:
            return None
        return f"{model.describe}, {values.numel()} draws in one call: {problem}"
    return None
