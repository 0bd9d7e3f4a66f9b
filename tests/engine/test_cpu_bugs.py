"""Real CPU bugs of torch 2.13 named in issue 11 are reported as torch bugs or as not applicable,
never as the device's failure (CPU plays the device: it reproduces CPU's own result)."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import runner
from conformance.ops import spec_for
from conformance.samples import calls_for
from tests.engine.fake_kernels import CPU


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("samples"))


def _case(overload: str, layout: str, cache: str) -> runner.CaseOutcome:
    calls = calls_for(overload, torch.float32, cache)
    assert calls, overload
    return runner.run_case(CPU, overload, spec_for(overload), calls, layout, "native")


def test_group_norm_strided_weight_is_a_torch_bug_and_its_layout_precondition_not_applicable(
    cache,
):
    sliced = _case("native_group_norm", "sliced", cache)  # weight/bias strided
    assert sliced.failure is None and sliced.torch_bugs
    assert "cpu disagrees with itself" in sliced.torch_bugs[0]
    transposed = _case("native_group_norm", "transposed", cache)  # X not contiguous
    assert transposed.failure is None and transposed.samples == 0
    assert "not applicable to the transposed layout" in transposed.skip_reason


@pytest.mark.parametrize("overload", ["triu.out", "tril.out", "narrow_copy.out"])
def test_out_into_a_non_contiguous_view_is_a_torch_bug(overload, cache):
    outcome = _case(overload, "sliced", cache)
    assert outcome.failure is None, outcome.failure and outcome.failure.message
    assert outcome.torch_bugs, f"{overload}: CPU is wrong into a sliced out= on torch 2.13"


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_nondeterministic_cpu_reference_is_a_torch_bug_every_time(monkeypatch, layout):
    """Issue 32: a CPU kernel that reads uninitialised memory (tril.out into a channels_last
    out= through cpu_fallback) gave `failed` in one run and `torch-bug` in the next. A reference
    that changes between two runs of the same sample is reported as such, every run."""
    from conformance.engine.calls import Call
    from tests.engine.fake_kernels import run_with_kernel

    draws = iter(range(1, 1000))

    def wobbly(x):  # CPU's stand-in: each call another value
        return x + next(draws)

    calls = [Call("neg", (torch.arange(6.0).reshape(2, 3),), {})]
    for _ in range(3):
        with monkeypatch.context() as m:
            outcome = run_with_kernel(m, "neg", lambda x: x + 1000, calls, layout, reference=wobbly)
        assert outcome.failure is None, outcome.failure and outcome.failure.message
        assert outcome.torch_bugs and "cpu's reference is nondeterministic" in outcome.torch_bugs[0]
    # a device that is simply wrong against a stable reference still fails
    with monkeypatch.context() as m:
        wrong = run_with_kernel(m, "neg", lambda x: x + 1000, calls, layout)
    assert wrong.failure is not None and wrong.failure.check == "values"
