"""Random ops judged by their law where the parameters do not make a distribution of values:
dropout (the share kept, the kept values scaled by 1/(1-p), the gradient masked and scaled the
same way), randperm (a permutation, uncorrelated with the positions, with the ascents of a
uniform one), multinomial without replacement (no repeats in a row, the first draw of each row
by the weights), cauchy_ (its quartiles), random_ without bounds (uniform integers over the
dtype's range) and rrelu in training (slopes uniform in [lower, upper], the noise written).
Each is a `draw_tests.Model`: one large draw on each side; CPU's must pass first.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from conformance.engine.draw_tests import (
    DRAWS,
    Model,
    categories_test,
    integers_test,
    moments_test,
    z_test,
)

DROPOUTS = ("dropout", "native_dropout")
# multinomial without replacement: rows drawn in the one large call (each row: a weight vector)
ROWS = 1 << 15


def model_of(overload: str, call: Any, args: dict[str, Any]) -> Model | None:
    """The law of one sample of `overload` (None: it has none here). `args`: the call's
    arguments by schema name."""
    if overload in DROPOUTS:
        return _dropout(overload, args)
    if overload in ("randperm", "randperm.generator"):
        return _randperm(overload, args)
    if overload == "multinomial" and args.get("replacement") is False:
        return _multinomial_without_replacement(args)
    if overload == "cauchy_":
        return _cauchy(args)
    if overload == "random_":
        return _random_full(args)
    if overload in ("rrelu_with_noise", "rrelu"):
        return _rrelu(overload, args)
    return None


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def _dropout(overload: str, args: dict[str, Any]) -> Model | None:
    x, p, train = args.get("input"), args.get("p"), args.get("train")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or train is not True:
        return None
    if not isinstance(p, float) or not 0 < p < 1:
        return None
    dtype = x.dtype
    scale = float(torch.tensor(1 / (1 - p), dtype=dtype))  # 1/(1-p) as the dtype holds it
    weights = (torch.arange(DRAWS) % 7 + 1).to(dtype)  # the gradient: exact in every dtype

    def draw(op: Any, dev: torch.device | str) -> tuple:
        ones = torch.ones(DRAWS, dtype=dtype).to(dev).requires_grad_(True)
        out = op(ones, p, True)
        out, mask = out if isinstance(out, tuple) else (out, None)
        grad = None
        if out.requires_grad:  # the backward the op defines (a vendor's own, at its key)
            out.backward(weights.to(dev))
            grad = ones.grad
        return out.detach(), grad, mask

    def test(drawn: tuple) -> str | None:
        out, grad, mask = drawn
        kept = out != 0
        wrong = kept & ((out - scale).abs() > 2 * _eps(dtype) * scale)
        if bool(wrong.any()):
            return (
                f"{int(wrong.sum())} kept values of an input of ones are not 1/(1-p) = "
                f"{scale:.6g} (e.g. {float(out[wrong][0]):.6g})"
            )
        n = out.numel()
        problem = z_test("values kept", float(kept.sum()), n * (1 - p), math.sqrt(n * p * (1 - p)))
        if problem:
            return problem
        if mask is not None and bool((mask.bool() != kept).any()):
            return "the mask returned is not where the values were kept"
        if grad is None:
            return None
        expected = weights.to(torch.float64) * kept * scale
        off = (grad - expected).abs() > 2 * _eps(dtype) * expected.abs()
        if bool(off.any()):
            i = int(off.nonzero()[0])
            return (
                f"the gradient is not the incoming gradient masked and scaled by 1/(1-p): "
                f"{int(off.sum())} of {n} elements differ, e.g. {float(grad[i]):.6g} where "
                f"{float(expected[i]):.6g} (kept: {bool(kept[i])})"
            )
        return None

    return Model(f"{overload} p={p:g} of ones, with its backward", draw, test)


def _randperm(overload: str, args: dict[str, Any]) -> Model | None:
    n = args.get("n")
    dtype = args.get("dtype")
    dtype = dtype if isinstance(dtype, torch.dtype) else torch.int64  # the schema's default: 4
    if not isinstance(n, int) or n < 2 or dtype not in (torch.int64, torch.int32):
        return None
    size = DRAWS

    def draw(op: Any, dev: torch.device | str) -> torch.Tensor:
        return op(size, dtype=dtype, device=dev)

    def test(x: torch.Tensor) -> str | None:
        if not torch.equal(x.sort().values, torch.arange(size, dtype=torch.float64)):
            return f"not a permutation of 0..{size - 1}"
        pos = torch.arange(size, dtype=torch.float64)
        rho = float(torch.corrcoef(torch.stack([pos, x]))[0, 1])  # Spearman: ranks are values
        problem = z_test("rank correlation with the positions", rho, 0.0, 1 / math.sqrt(size - 1))
        # ascents (x[i+1] > x[i]): (n-1)/2 on average, variance (n+1)/12, in a uniform one
        ascents = float((x[1:] > x[:-1]).sum())
        return problem or z_test("ascents", ascents, (size - 1) / 2, math.sqrt((size + 1) / 12))

    return Model(f"randperm({size})", draw, test)


def _multinomial_without_replacement(args: dict[str, Any]) -> Model | None:
    w, k = args.get("self"), args.get("num_samples")
    if not isinstance(w, torch.Tensor) or w.dim() not in (1, 2) or not isinstance(k, int):
        return None
    weights = w.reshape(-1, w.shape[-1])[0].to(torch.float64)
    positive = int((weights > 0).sum())
    if bool((weights < 0).any()) or not 1 <= k <= positive:
        return None
    rows = w.reshape(-1, w.shape[-1])[:1].expand(ROWS, -1).contiguous()

    def draw(op: Any, dev: torch.device | str) -> torch.Tensor:
        return op(rows.to(dev), k, False)

    def test(x: torch.Tensor) -> str | None:
        drawn = x.reshape(ROWS, k)
        if k > 1:
            ordered = drawn.sort(1).values
            repeats = int((ordered[:, 1:] == ordered[:, :-1]).any(1).sum())
            if repeats:
                return f"{repeats} of {ROWS} rows draw a category twice (without replacement)"
        if bool((weights[drawn.clamp(0, weights.numel() - 1).long()] == 0).any()):
            return "a category of weight 0 drawn"
        return categories_test(drawn[:, 0], weights / weights.sum())

    return Model(
        f"multinomial without replacement, {k} of weights "
        f"{[round(float(v), 4) for v in weights]}, {ROWS} rows",
        draw,
        test,
    )


def _random_full(args: dict[str, Any]) -> Model | None:
    """random_() without bounds: uniform integers in [0, 2^digits] for a floating dtype (its
    mantissa's digits), [0, max] for an integer dtype (int64's range is past float64's
    integers: not judged here)."""
    x = args.get("self")
    if not isinstance(x, torch.Tensor) or x.dtype in (torch.int64, torch.uint64):
        return None
    if x.is_floating_point():
        hi = 2 ** round(-math.log2(torch.finfo(x.dtype).eps) + 1) + 1
    elif x.dtype == torch.bool:
        hi = 2
    else:
        hi = torch.iinfo(x.dtype).max + 1
    return Model(
        f"random_ over [0, {hi - 1}]",
        lambda op, dev: op(torch.empty(DRAWS, dtype=x.dtype, device=dev)),
        lambda v: integers_test(v, 0, hi),
    )


def _rrelu(overload: str, args: dict[str, Any]) -> Model | None:
    """rrelu in training: a negative input is scaled by a slope drawn uniformly from [lower,
    upper] (and rrelu_with_noise writes that slope into `noise`); a positive one is kept."""
    x, lo, hi = args.get("self"), args.get("lower", 0.125), args.get("upper", 1 / 3)
    if args.get("training") is not True or not isinstance(x, torch.Tensor):
        return None
    if not x.is_floating_point() or not isinstance(lo, float) or not isinstance(hi, float):
        return None
    if not hi > lo:
        return None
    eps = torch.finfo(x.dtype).eps

    def draw(op: Any, dev: torch.device | str) -> tuple:
        negative = torch.full((DRAWS,), -1.0, dtype=x.dtype).to(dev)
        if overload == "rrelu":
            return op(negative, lo, hi, True), None
        noise = torch.empty(DRAWS, dtype=x.dtype).to(dev)
        return op(negative, noise, lo, hi, True), noise

    def test(drawn: tuple) -> str | None:
        out, noise = drawn
        slopes = -out
        outside = int(((slopes < lo * (1 - 2 * eps)) | (slopes > hi * (1 + 2 * eps))).sum())
        if outside:
            return f"{outside} slopes of negative inputs outside [{lo:g}, {hi:g}]"
        if noise is not None and bool(((noise - slopes).abs() > 2 * eps * slopes.abs()).any()):
            return "the noise written is not the slope each negative input was scaled by"
        u = (slopes - lo) / (hi - lo)
        return moments_test(u, 0.5, 1 / 12, 1 / 80, "scaled slope ")

    return Model(f"{overload} training slopes in [{lo:g}, {hi:g}]", draw, test)


def _cauchy(args: dict[str, Any]) -> Model | None:
    x = args.get("self")
    median, sigma = args.get("median", 0.0), args.get("sigma", 1.0)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return None
    if not isinstance(median, float | int) or not isinstance(sigma, float | int) or sigma <= 0:
        return None

    def draw(op: Any, dev: torch.device | str) -> torch.Tensor:
        return op(torch.empty(DRAWS, dtype=x.dtype, device=dev), median, sigma)

    def test(v: torch.Tensor) -> str | None:
        n = v.numel()
        for share, at in ((0.25, median - sigma), (0.5, median), (0.75, median + sigma)):
            below = float((v < at).sum())
            problem = z_test(
                f"draws below {at:g}", below, n * share, math.sqrt(n * share * (1 - share))
            )
            if problem:
                return f"{problem} (the cauchy quartiles are median -+ sigma)"
        return None

    return Model(f"cauchy median={median:g} sigma={sigma:g}", draw, test)


__all__ = ("DROPOUTS", "model_of")
