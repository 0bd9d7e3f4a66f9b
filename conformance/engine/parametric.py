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
from typing import Any

import torch

from conformance.engine import random_laws
from conformance.engine.draw_tests import (
    CATEGORY_DRAWS,
    DRAWS,
    Model,
    Z,
    categories_test,
    integers_test,
    moments_test,
    z_test,
)
from conformance.engine.transfer import read_back

__all__ = ["CATEGORY_DRAWS", "DRAWS", "Z", "Model", "check", "model_of"]


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


def _schema_args(overload: str, call: Any) -> dict[str, Any]:
    """The call's arguments by the overload's schema names, defaults included."""
    from conformance.engine.discovery import resolve

    try:
        schema = resolve(overload)._schema
    except (AttributeError, RuntimeError):
        return {}
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    return _args(call, [a.name for a in schema.arguments], defaults)


def _buffer(self: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    return torch.empty(DRAWS, dtype=self.dtype, device=device)


def model_of(overload: str, call: Any) -> Model | None:
    """The model of one sample of `overload` (named as a run names it: `normal_`, the default
    overload without its `.default`), if its parameters are known (else None)."""
    overload = overload.removesuffix(".default")
    law = random_laws.model_of(overload, call, _schema_args(overload, call))
    if law is not None:
        return law
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
                return _positive(x) or moments_test((x.log() - mean) / std, 0, 1, 3, "log ")
            return moments_test((x - mean) / std, 0.0, 1.0, 3.0, "standardised ")

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
            lambda x: _positive(x, 0.0) or moments_test(x * lam, 1.0, 1.0, 9.0, "scaled "),
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
            lambda x: categories_test(x, weights / weights.sum()),
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
            lambda x: integers_test(x, lo, hi),
        )
    return None


def _bernoulli(x: torch.Tensor, p: float | torch.Tensor) -> str | None:
    if not bool(((x == 0) | (x == 1)).all()):
        return "draws other than 0 and 1"
    p_t = torch.as_tensor(p, dtype=torch.float64).expand_as(x)
    sd = math.sqrt(float((p_t * (1 - p_t)).sum()))
    return z_test("number of ones", float(x.sum()), float(p_t.sum()), sd)


def _positive(x: torch.Tensor, floor: float | None = None) -> str | None:
    bad = int((x < 0).sum()) if floor is not None else int((x <= 0).sum())
    return f"{bad} draws below the support" if bad else None


def _uniform(x: torch.Tensor, lo: float, hi: float) -> str | None:
    outside = int(((x < lo) | (x > hi)).sum())
    if outside:
        return f"{outside} draws outside [{lo:g}, {hi:g}]"
    u = (x - lo) / (hi - lo)
    return moments_test(u, 0.5, 1 / 12, 1 / 80, "scaled ")


def _geometric(x: torch.Tensor, p: float) -> str | None:
    if not bool(((x >= 1) & (x == x.round())).all()):
        return "draws other than positive integers"
    q = 1 - p
    var = q / p**2
    mu4 = q * (p * p + 9 * q) / p**4  # fourth central moment of the geometric distribution
    return moments_test(x, 1 / p, var, mu4)


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
            cpu = _host(model.draw(op, "cpu"))
        except Exception:  # noqa: BLE001 - the op does not take these parameters this way
            return None
        if model.test(cpu) is not None:
            return None  # the model does not fit CPU's own draws in this dtype: no claim
        drawn = run(lambda model=model: model.draw(op, device))
        if not isinstance(drawn, torch.Tensor | tuple):
            return None  # the device raised: the ordinary samples judged that
        problem = model.test(_host(drawn))
        if problem is None:
            return None
        count = (drawn[0] if isinstance(drawn, tuple) else drawn).numel()
        return f"{model.describe}, {count} draws in one call: {problem}"
    return None


def _host(drawn: Any) -> Any:
    """A draw (a tensor, or a tuple of tensors and Nones: values, gradient, mask) as flat
    float64 host tensors."""
    if isinstance(drawn, tuple):
        return tuple(None if t is None else _host(t) for t in drawn)
    return read_back(drawn.detach()).to(torch.float64).reshape(-1)
