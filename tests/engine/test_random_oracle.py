"""The random-op oracle has power on tiny samples: a wrong generator fails, a correct one drawing
from another stream passes.

CPU plays the device with a planted kernel (tests/engine/fake_kernels.py). The samples are as
small as OpInfo's (3 to 12 draws), where the Kolmogorov-Smirnov limit is above 1. Switched off
(tests/meta/ablation.py): without the further runs (`random-redraw`) every `*_fails` test fails;
without the value-set check (`random-value-set`) the multinomial test (randint's draws of 10 are
then still caught, as draws beyond CPU's range); without the range check (`random-range`)
`test_draws_beyond_cpus_range_fail`."""

from __future__ import annotations

import re
import traceback
from types import SimpleNamespace

import pytest
import torch

from conformance.engine import oracles
from conformance.engine.calls import Call
from tests.engine.fake_kernels import run_with_kernel

P = 0.3
SHAPE = (3, 4)
BERNOULLI = {
    "bernoulli.p": Call("bernoulli.p", (torch.zeros(SHAPE), P)),
    "bernoulli.default": Call("bernoulli.default", (torch.full(SHAPE, P),)),
}


def _p(args: tuple) -> float:
    """The probability of a bernoulli.p / bernoulli.default call (one value for every element)."""
    return args[1] if len(args) > 1 else float(args[0].reshape(-1)[0])


def _own_stream(offset: int = 0) -> torch.Generator:
    """A generator of the 'device': seeded from torch.manual_seed's seed, another stream."""
    return torch.Generator().manual_seed(torch.initial_seed() * 7919 + 17 + offset)


def _bernoulli_zeros(a, *args, **kwargs):
    return torch.zeros_like(a)


def _bernoulli_ones(a, *args, **kwargs):
    return torch.ones_like(a)


def _bernoulli_one_minus_p(a, *args, **kwargs):
    return torch.bernoulli(torch.full_like(a, 1 - _p((a, *args))))


def _bernoulli_own_stream(a, *args, **kwargs):
    return torch.bernoulli(torch.full_like(a, _p((a, *args))), generator=_own_stream())


def _fails_on_values(out, *words: str) -> None:
    assert out.failure is not None, "the wrong generator passed"
    assert out.failure.check == "values", out.failure.message
    for word in words:
        assert word in out.failure.message, out.failure.message


def _device_mean(message: str) -> float:
    return float(re.search(r"device mean ([-0-9.e]+)", message).group(1))


@pytest.mark.parametrize("overload", list(BERNOULLI))
def test_bernoulli_all_zeros_fails(monkeypatch, overload):
    out = run_with_kernel(monkeypatch, overload, _bernoulli_zeros, [BERNOULLI[overload]])
    _fails_on_values(out, "Kolmogorov-Smirnov", "171 runs with seeds 1234..1404")  # 2052 draws
    assert _device_mean(out.failure.message) == 0


@pytest.mark.parametrize("overload", list(BERNOULLI))
def test_bernoulli_all_ones_fails(monkeypatch, overload):
    out = run_with_kernel(monkeypatch, overload, _bernoulli_ones, [BERNOULLI[overload]])
    _fails_on_values(out, "Kolmogorov-Smirnov")
    assert _device_mean(out.failure.message) == 1


@pytest.mark.parametrize("overload", list(BERNOULLI))
def test_bernoulli_drawing_with_one_minus_p_fails(monkeypatch, overload):
    out = run_with_kernel(monkeypatch, overload, _bernoulli_one_minus_p, [BERNOULLI[overload]])
    _fails_on_values(out, "Kolmogorov-Smirnov")
    assert _device_mean(out.failure.message) > 0.6  # cpu's is 0.3


def _randint_like_one_to_high(a, high, **kwargs):
    return torch.randint_like(a, 1, high + 1, **kwargs)


def test_randint_like_from_one_to_high_fails(monkeypatch):
    calls = [Call("randint_like", (torch.zeros(5, dtype=torch.int64), 10))]
    out = run_with_kernel(monkeypatch, "randint_like", _randint_like_one_to_high, calls)
    _fails_on_values(out, "device drew 10 (", "a value cpu never drew", "cpu's values: 0..9")


def test_multinomial_drawing_a_zero_weight_category_fails(monkeypatch):
    """Draws within CPU's range and close in distribution (KS cannot tell them apart), but of a
    category CPU never draws: only the value-set check sees it."""
    calls = [Call("multinomial", (torch.tensor([1.0, 2.0, 0.0, 5.0]), 3, True))]

    def zero_as_one(w, n, replacement=False, generator=None):
        return torch.multinomial(w.clamp_min(1.0), n, replacement, generator=_own_stream())

    out = run_with_kernel(monkeypatch, "multinomial", zero_as_one, calls)
    _fails_on_values(out, "device drew 2 (", "cpu's values: 0, 1, 3")


def test_draws_beyond_cpus_range_fail(monkeypatch):
    """uniform_ overshooting its upper bound by 5%: floats, so no value set, and too close for
    KS; about 100 of 2048 draws above CPU's largest are not chance."""
    calls = [Call("uniform_", (torch.zeros(8), 0.0, 4.0))]

    def overshoots(a, low=0.0, high=1.0, generator=None):
        return torch.ops.aten.uniform_.default(a, low, low + (high - low) * 1.05)

    out = run_with_kernel(monkeypatch, "uniform_", overshoots, calls)
    _fails_on_values(out, "device draws above 3.99", "the largest of cpu's 2048 draws")


def test_device_raising_when_run_again_fails(monkeypatch):
    def first_seed_only(a, *args, **kwargs):
        if torch.initial_seed() != oracles.SEED:
            raise RuntimeError("generator state lost")
        return _bernoulli_own_stream(a, *args)

    out = run_with_kernel(monkeypatch, "bernoulli.p", first_seed_only, [BERNOULLI["bernoulli.p"]])
    assert out.failure.check == "error", out.failure.message
    assert "run again after manual_seed(1235): device raised RuntimeError" in out.failure.message


# ---- correct generators pass --------------------------------------------------------------
@pytest.mark.parametrize("overload", list(BERNOULLI))
def test_bernoulli_from_another_stream_passes(monkeypatch, overload):
    out = run_with_kernel(monkeypatch, overload, _bernoulli_own_stream, [BERNOULLI[overload]])
    assert out.failure is None, out.failure.message


def test_randint_like_from_another_stream_passes(monkeypatch):
    calls = [Call("randint_like", (torch.zeros(5, dtype=torch.int64), 10))]

    def own(a, high, **kwargs):
        return torch.randint(0, high, a.shape, dtype=a.dtype, generator=_own_stream())

    out = run_with_kernel(monkeypatch, "randint_like", own, calls)
    assert out.failure is None, out.failure.message


def test_unbounded_integral_draws_from_another_stream_pass(monkeypatch):
    """geometric_'s tail: values one side draws once and the other never are chance, not a
    wrong support (the value-set check needs a value drawn far too often). Three streams."""
    calls = [Call("geometric_", (torch.zeros(SHAPE), P))]
    for offset in range(3):

        def own(a, p, generator=None, offset=offset):
            return torch.ops.aten.geometric_.default(a, p, generator=_own_stream(offset))

        out = run_with_kernel(monkeypatch, "geometric_", own, calls)
        assert out.failure is None, out.failure.message


@pytest.mark.parametrize(
    "call",
    [
        BERNOULLI["bernoulli.p"],
        BERNOULLI["bernoulli.default"],
        Call("randint_like", (torch.zeros(5, dtype=torch.int64), 10)),
    ],
    ids=lambda c: c.overload,
)
def test_cpu_kernel_passes_without_further_runs(monkeypatch, call):
    calls_made = []
    real = oracles.pool
    monkeypatch.setattr(oracles, "pool", lambda *a: calls_made.append(1) or real(*a))
    out = run_with_kernel(monkeypatch, call.overload, None, [call])
    assert out.failure is None, out.failure.message
    assert not calls_made  # CPU's own draws after the same seed: equal, nothing pooled


def test_pooling_stops_at_the_minimum_and_at_the_cap():
    one = (torch.zeros(1), torch.zeros(1))
    a, e, repeats = oracles.pool(torch.ones(1), torch.ones(1), iter(lambda: one, None))
    assert repeats == oracles.MAX_REPEATS and a.numel() == e.numel() == oracles.MAX_REPEATS + 1
    twelve = (torch.zeros(12), torch.zeros(12))
    a, _, repeats = oracles.pool(torch.ones(12), torch.ones(12), iter(lambda: twelve, None))
    assert a.numel() >= oracles.MIN_DRAWS > a.numel() - 12


def test_a_lazy_runtime_s_own_seed_follows_torch_s():
    """torch.manual_seed does not reach torch_xla's generator: the run's seeding also calls the
    lazy runtime's own (xm.set_rng_state), with the same seed as CPU's (issue 45)."""
    from conformance.engine import oracles
    from conformance.engine.backend import Backend

    seen: list[int] = []
    runtime = SimpleNamespace(seed=seen.append)
    lazy = _fake_backend(lambda name: None, runtime)
    try:
        oracles.use_seeding(lambda value: Backend.seed_generators(lazy, value))
        oracles.seed(2)
        assert torch.initial_seed() == oracles.SEED + 2
        oracles.seed()
    finally:
        oracles.use_seeding(None)
    assert seen == [oracles.SEED + 2, oracles.SEED]
    oracles.seed()
    assert seen == [oracles.SEED + 2, oracles.SEED]  # not the run's seeding: torch's alone


def test_seeding_reaches_the_device_under_test_and_no_other(monkeypatch):
    """The run seeds CPU's generator and the device module's as torch.manual_seed does (its
    manual_seed_all, where the module also has _is_in_bad_fork), and not the generators of
    devices not under test: torch.manual_seed formats the caller's stack for each one not
    initialised, 2-3 ms a call under pytest, and a random op's case seeds before each draw."""
    from conformance.engine.backend import Backend

    monkeypatch.setattr(traceback, "format_stack", _no_stack)
    seen: list[int] = []
    module = SimpleNamespace(manual_seed_all=seen.append, _is_in_bad_fork=lambda: False)
    device = _fake_backend(lambda name: getattr(module, name, None), None)
    Backend.seed_generators(device, 77)
    assert seen == [77] and torch.initial_seed() == 77
    del module._is_in_bad_fork  # torch seeds such a device module not at all; neither do we
    Backend.seed_generators(device, 78)
    assert seen == [77] and torch.initial_seed() == 78


def _fake_backend(device_function, lazy) -> SimpleNamespace:
    """What Backend.seed_generators reads of a backend: its device module's functions and its
    lazy runtime."""
    from conformance.engine.backend import Backend

    fake = SimpleNamespace(device_function=device_function, lazy=lazy)
    fake.device_seed_all = lambda: Backend.device_seed_all(fake)
    return fake


def _no_stack(*args, **kwargs):
    raise AssertionError("seeding formatted a stack: it queued a seed for a device not in use")
