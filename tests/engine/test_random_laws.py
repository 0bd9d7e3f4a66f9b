"""The laws of the random ops whose draws are not a distribution of values (engine/random_laws.py):
CPU's own ops pass each, and a kernel wrong in the way each law exists for fails it."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import parametric
from conformance.engine.calls import Call
from conformance.engine.discovery import resolve
from conformance.ops import spec_for


def _model(overload: str, dtype: torch.dtype = torch.float32, index: int = 0):
    calls = spec_for(overload).samples(dtype) if spec_for(overload).samples else []
    if overload == "randperm":
        calls = [Call("randperm", (10,))]
    if overload == "random_":
        calls = [Call("random_", (torch.zeros(4, dtype=dtype),))]
    found = [m for c in calls if (m := parametric.model_of(overload, c)) is not None]
    return found[index]


def _verdict(model, op) -> str | None:
    return model.test(parametric._host(model.draw(op, "cpu")))


class _Masked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, grad_scale):
        ctx.mask, ctx.scale = torch.rand_like(x) >= p, grad_scale / (1 - p)
        return x * ctx.mask / (1 - p)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.mask * ctx.scale, None, None


WRONG = {
    "unscaled": lambda x, p, t: torch.ops.aten.dropout(x, p, t) * (1 - p),
    "keeps 1-p+0.02": lambda x, p, t: torch.ops.aten.dropout(x, p - 0.02, t) * (0.72 / 0.7),
    "backward 1 % off": lambda x, p, t: _Masked.apply(x, p, 1.01),
}


@pytest.mark.parametrize(
    "overload", ["dropout", "native_dropout", "cauchy_", "randperm", "random_"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cpu_keeps_the_law(overload: str, dtype: torch.dtype) -> None:
    model = _model(overload, dtype)
    assert _verdict(model, resolve(overload)) is None


def test_multinomial_without_replacement_on_cpu_keeps_the_law() -> None:
    model = _model("multinomial", index=1)
    assert "without replacement" in model.describe
    assert _verdict(model, resolve("multinomial")) is None


@pytest.mark.parametrize(("wrong", "words"), [
    ("unscaled", "are not 1/(1-p)"),
    ("keeps 1-p+0.02", "values kept"),
    ("backward 1 % off", "the gradient is not the incoming gradient"),
])  # fmt: skip
def test_a_wrong_dropout_breaks_the_law(wrong: str, words: str) -> None:
    problem = _verdict(_model("dropout"), WRONG[wrong])
    assert problem is not None and words in problem, problem


def test_wrong_draws_break_their_laws() -> None:
    identity = _verdict(_model("randperm"), lambda n, dtype, device: torch.arange(n, dtype=dtype))
    assert identity is not None and "rank correlation" in identity
    wide = _verdict(_model("cauchy_"), lambda t, m, s: t.cauchy_(m, s * 1.1))
    assert wide is not None and "quartiles" in wide
    multinomial = _model("multinomial", index=1)
    repeats = _verdict(multinomial, lambda w, k, r: torch.multinomial(w, k, True))
    assert repeats is not None and "twice" in repeats
    flat = _verdict(multinomial, lambda w, k, r: torch.multinomial((w > 0).to(w.dtype), k, False))
    assert flat is not None and "category" in flat
    half = _verdict(_model("random_"), lambda t: t.random_(0, 2**23))  # half of float32's range
    assert half is not None and "mean" in half

    def sorted_prefix(n, dtype, device):  # a permutation whose first 3 % is in order (z ~ 20)
        x = torch.randperm(n, dtype=dtype)
        x[: n // 33] = x[: n // 33].sort().values
        return x

    ascents = _verdict(_model("randperm"), sorted_prefix)
    assert ascents is not None and "ascents" in ascents


def test_rrelu_in_training_owes_uniform_slopes_and_the_noise_it_used():
    law = parametric.model_of("rrelu", Call("rrelu", (torch.randn(4), 0.1, 0.3, True)))
    assert _verdict(law, resolve("rrelu")) is None
    narrow = _verdict(law, lambda x, lo, hi, t: torch.ops.aten.rrelu(x, lo, hi * 0.95, t))
    assert narrow is not None and "scaled slope mean" in narrow
    noisy = parametric.model_of(
        "rrelu_with_noise",
        Call("rrelu_with_noise", (torch.randn(4), torch.empty(4), 0.1, 0.3, True)),
    )
    assert _verdict(noisy, resolve("rrelu_with_noise")) is None

    def stale_noise(x, noise, lo, hi, training):
        out = torch.ops.aten.rrelu_with_noise(x, noise, lo, hi, training)
        noise.fill_(0.2)
        return out

    assert "noise written" in (_verdict(noisy, stale_noise) or "")
    eval_mode = Call("rrelu", (torch.randn(4), 0.1, 0.3, False))
    assert parametric.model_of("rrelu", eval_mode) is None  # deterministic: compared with CPU
