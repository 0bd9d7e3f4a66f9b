"""float32/float64 functions IEEE only recommends correct rounding for are judged in ulps
(engine/ulp_bounds.py), never by an absolute tolerance wider than the result's own ulps
(issue 79, hole 1: a fast-math `log` up to 772 ulps off, a naive expm1 and log1p passed)."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.calls import Call
from conformance.engine.discovery import resolve
from conformance.engine.exactness import ulp_distance
from conformance.ops import spec_for
from conformance.samples import calls_for
from tests.engine.fake_kernels import run_with_kernel, ulps_off

F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("samples"))


def _correctly_rounded(overload: str):
    real = resolve(overload)
    return lambda x: real(x.to(F64)).to(x.dtype)


def _run(monkeypatch, overload, kernel, calls):
    try:
        return run_with_kernel(monkeypatch, overload, kernel, calls, spec=spec_for(overload))
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("overload", ["exp", "log", "tanh"])
def test_beyond_the_documented_bound_fails_within_passes(monkeypatch, cache, overload, dtype):
    calls = calls_for(overload, dtype, cache)
    assert _run(monkeypatch, overload, None, calls).failure is None  # CPU's bits
    within = ulps_off(overload, 1) if dtype == F64 else _correctly_rounded(overload)
    assert _run(monkeypatch, overload, within, calls).failure is None
    wrong = _run(monkeypatch, overload, ulps_off(overload, 8), calls)
    assert wrong.failure is not None and wrong.failure.check == "rounding", wrong.notes
    assert "CUDA documents at most" in wrong.failure.message


def test_fast_math_log_and_naive_expm1_log1p_fail(monkeypatch):
    x = torch.linspace(0.5, 1.5, 257, dtype=F32)
    fast = _run(monkeypatch, "log", lambda t: torch.log(t) + 2e-7, [Call("log", (x,))])
    small = torch.logspace(-6, -1, 200, dtype=F32)
    naive_expm1 = _run(monkeypatch, "expm1", lambda t: torch.exp(t) - 1, [Call("expm1", (small,))])
    naive_log1p = _run(monkeypatch, "log1p", lambda t: torch.log(1 + t), [Call("log1p", (small,))])
    for outcome in (fast, naive_expm1, naive_log1p):
        assert outcome.failure is not None and outcome.failure.check == "rounding", outcome.notes
    assert int(ulp_distance(torch.log(x) + 2e-7, torch.log(x)).max()) > 100  # within atol


def test_a_function_cpu_computes_less_accurately_is_held_to_cpus_distance(monkeypatch):
    """Where CPU's own float32 result is farther from the truth than the bound, a device as far
    (CPU's bits, or another result as far) passes."""
    x = torch.tensor([1e4, 3e4, 1e5, 12345.678], dtype=F32)  # large arguments of sin
    assert _run(monkeypatch, "sin", None, [Call("sin", (x,))]).failure is None
