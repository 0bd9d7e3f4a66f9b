"""Random ops: one large sample each, so that the distribution of the draws is judged in one run.

Every overload with a `Generator?` argument (or in `oracles.NONDETERMINISTIC`) is compared by
`engine/oracles.py`: equal draws after the same seed, else the same properties on at least
`oracles.MIN_DRAWS` draws per side. OpInfo's samples are a few draws each; the oracle runs them
again with further seeds (at most `oracles.MAX_REPEATS` times) and pools the draws. These add
4096 draws per op in a single run (parameters chosen so that a wrong mean, spread or support is
far outside the tests' limits), so the common ops are also judged on more than the minimum.
"""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.ops import OpSpec, register

DRAWS = (64, 64)
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _draws(dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(DRAWS, dtype=dtype)


def _floats_only(make):
    def samples(dtype: torch.dtype) -> list[Call]:
        return make(dtype) if dtype in FLOATS else []

    return samples


LARGE = {
    "normal_": _floats_only(lambda d: [Call("normal_", (_draws(d), 2.0, 3.0))]),
    "uniform_": _floats_only(lambda d: [Call("uniform_", (_draws(d), -1.0, 5.0))]),
    "exponential_": _floats_only(lambda d: [Call("exponential_", (_draws(d), 2.0))]),
    "log_normal_": _floats_only(lambda d: [Call("log_normal_", (_draws(d), 0.5, 0.5))]),
    "cauchy_": _floats_only(lambda d: [Call("cauchy_", (_draws(d), 1.0, 2.0))]),
    "geometric_": _floats_only(lambda d: [Call("geometric_", (_draws(d), 0.3))]),
    "bernoulli_.float": lambda d: (
        [Call("bernoulli_.float", (_draws(d), 0.3))] if d != torch.bool else []
    ),
    "bernoulli.p": _floats_only(lambda d: [Call("bernoulli.p", (_draws(d), 0.3))]),
    "random_.from": lambda d: (
        [Call("random_.from", (_draws(d), -3, 9))] if d not in (torch.bool, torch.uint8) else []
    ),
    "random_": lambda d: [Call("random_", (_draws(d),))],
    "random_.to": lambda d: [Call("random_.to", (_draws(d), 2 if d == torch.bool else 9))],
    "multinomial": _floats_only(
        lambda d: [
            Call("multinomial", (torch.tensor([[1.0, 2.0, 0.0, 5.0]] * 64).to(d), 64, True)),
            Call("multinomial", (torch.tensor([[1.0, 2.0, 0.0, 5.0, 3.0]] * 64).to(d), 3)),
        ]
    ),
}

for _overload, _samples in LARGE.items():
    register(
        OpSpec(
            _overload,
            samples=_samples,
            nondeterministic=True,
            notes="random: equal draws after the same seed, else the same distribution",
        )
    )
