"""The sign of a zero result (engine/bits.py `signed-zero`): owed as the float64 result has it,
so a CPU whose zero is its own error (float32 gelu of -5.8 on AVX2 is +0, the result -1.8e-8)
does not fail a device that rounds to -0, and a zero of the wrong sign still fails."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.engine.discovery import resolve
from conformance.ops import spec_for
from tests.engine.fake_kernels import run_with_kernel

GELU = resolve("gelu")


def _zeros_signed(sign_of):
    """gelu, each zero result given the sign of `sign_of(input)`."""

    def kernel(t, approximate="none"):
        out = GELU(t, approximate=approximate)
        return torch.where(out == 0, torch.copysign(torch.zeros_like(out), sign_of(t)), out)

    return kernel


def _calls():
    # -5.8 .. -7: gelu underflows to a zero in float32 (the result is -1.8e-8 .. -1e-11); +0:
    # gelu(+0) is +0 exactly
    x = torch.tensor([-5.8, -6.2, -6.6, -7.0, 0.0, 1.5, -0.5], dtype=torch.float32)
    return [Call("gelu", (x,))]


def _run(monkeypatch, kernel, cpu_kernel):
    spec = spec_for("gelu")
    spec = type(spec)(**{**spec.__dict__, "reference": cpu_kernel})
    try:
        return run_with_kernel(monkeypatch, "gelu", kernel, _calls(), spec=spec)
    finally:
        monkeypatch.undo()


def test_a_zero_with_the_sign_of_the_result_passes_where_cpus_zero_has_the_other(monkeypatch):
    plus_zeros = _zeros_signed(lambda t: torch.ones_like(t))  # CPU's zeros all +0, as on AVX2
    outcome = _run(monkeypatch, _zeros_signed(lambda t: t), plus_zeros)
    assert outcome.failure is None, outcome.failure


def test_a_zero_of_the_wrong_sign_fails_where_cpu_is_right(monkeypatch):
    minus_zeros = _zeros_signed(lambda t: -torch.ones_like(t))  # gelu(+0) = -0: wrong
    outcome = _run(monkeypatch, minus_zeros, _zeros_signed(lambda t: t))
    assert outcome.failure is not None and outcome.failure.check == "signed-zero"
    assert "1 zero(s) of the other sign" in outcome.failure.message


def test_a_zero_of_the_wrong_sign_fails_where_cpu_is_wrong_too(monkeypatch):
    """CPU's +0 for gelu(-5.8) is no licence for a device's -0 for gelu(+0)."""
    plus_zeros = _zeros_signed(lambda t: torch.ones_like(t))
    outcome = _run(monkeypatch, _zeros_signed(lambda t: -torch.ones_like(t)), plus_zeros)
    assert outcome.failure is not None and outcome.failure.check == "signed-zero"
    assert "1 zero(s) of the other sign" in outcome.failure.message
