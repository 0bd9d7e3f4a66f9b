"""Run one case with CPU standing in for the device and a planted kernel: the engine's checks
against a deliberately wrong implementation, no backend needed."""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch

from conformance.engine import runner
from conformance.engine.backend import Backend
from conformance.engine.runner import CaseOutcome
from conformance.ops import OpSpec

CPU = Backend("fake", types.ModuleType("fake"), "cpu")


class FakeOp:
    """An overload whose schema is the real one and whose kernel is `fn`."""

    def __init__(self, real, fn: Callable) -> None:
        self._schema = real._schema
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def run_with_kernel(
    monkeypatch: pytest.MonkeyPatch,
    overload: str,
    fn: Callable | None,
    calls: list,
    layout: str = "contiguous",
    strict: bool = False,
    *,
    spec: OpSpec | None = None,
    path: str = "native",
    mode: str = "",
    exactness=None,
    policy=None,
    **spec_kw,
) -> CaseOutcome:
    """Run `calls` of `overload` on `path` (native, or fallback: judged as a cpu_fallback
    result) with `fn` as the "device" kernel (None: the real one). The op spec is `spec` or
    `OpSpec(overload, **spec_kw)`; CPU's reference is the spec's or the real op."""
    real = runner.resolve(overload)
    if fn is not None:
        monkeypatch.setattr(runner, "resolve", lambda name: FakeOp(real, fn))
    spec = spec if spec is not None else OpSpec(overload, **spec_kw)
    spec = type(spec)(**{**spec.__dict__, "reference": spec.reference or real})
    return runner.run_case(
        CPU,
        overload,
        spec,
        calls,
        layout,
        path,
        route=False,
        strict_errors=strict,
        mode=mode,
        exactness=exactness,
        **({"policy": policy} if policy is not None else {}),
    )


def ulps_off(overload: str, k: int) -> Callable:
    """The real kernel with every finite nonzero result moved `k` ulps (away from zero)."""
    real = runner.resolve(overload)
    ints = {4: torch.int32, 8: torch.int64}

    def kernel(*args, **kwargs):
        out = real(*args, **kwargs)
        bits = out.view(ints[out.element_size()])
        moved = torch.where((out != 0) & out.isfinite(), bits + k, bits).view(out.dtype)
        return torch.where(moved.isfinite(), moved, out)

    return kernel
