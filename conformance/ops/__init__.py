"""Per-op specs: samples and check options for ops that OpInfo does not cover (well).

Each module in this package registers `OpSpec`s (engine/spec.py) with `register`. An overload
with no spec uses the defaults: OpInfo samples, all checks on.
"""

from __future__ import annotations

import importlib
import pkgutil

import torch

from conformance.engine.spec import OpSpec

__all__ = [
    "SPECS",
    "OpSpec",
    "register",
    "seeded_randn",
    "spec_for",
    "specs_with_samples",
    "tolerance_scales",
]


SPECS: dict[str, OpSpec] = {}
#: overloads that are calls into the device runtime, not ops with a CPU result to compare
#: (`record_stream`: CPU has no kernel; its contract is judged by what the caching allocator
#: does with the block): untested as op cases, for this reason
RUNTIME_CALLS = {
    "record_stream": "a runtime call (the stream the caching allocator must wait for), no op "
    "with a CPU result: judged by the contract case record-stream (conformance/contract)",
}


def seeded_randn(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Standard normal values of `shape` from a generator of its own seeded with `seed` (the
    same every run), in `dtype`: the op specs' samples."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def register(spec: OpSpec) -> OpSpec:
    SPECS[spec.overload] = spec
    return spec


def spec_for(overload: str) -> OpSpec:
    """The registered spec, or the default one (OpInfo samples, every check)."""
    _load_all()
    return SPECS.get(overload) or OpSpec(overload)


def tolerance_scales() -> dict[str, object]:
    """{overload: tol_scale} of every spec whose tolerance is not its dtype's base."""
    _load_all()
    return {o: s.tol_scale for o, s in SPECS.items() if s.tol_scale != 1.0}


def specs_with_samples() -> list[str]:
    """The overloads whose spec gives samples of its own."""
    _load_all()
    return sorted(o for o, s in SPECS.items() if s.samples is not None)


_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    _loaded = True
