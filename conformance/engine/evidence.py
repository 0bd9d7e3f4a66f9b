"""Tolerances from evidence: CPU's own error against float64, measured per sample.

An op's tolerance (engine/compare.py, widened per op by measured multipliers) is set for its
small samples. At 65,537 reduced elements it is both too loose and too tight in places: CPU's
cascade sum of float32 is accurate to a few ulps however long the row, while a bfloat16 sum that
accumulates in bfloat16 is off by 87 %. The -sizes cases therefore judge each sample by what CPU
achieves on it: the op is run again on CPU with every floating operand in float64 (integer data
operands converted to the result's dtype first, as type promotion does), CPU's largest distance
from that result over its floating outputs and written arguments is its own error, and the
device may differ from CPU by the dtype's base tolerance plus `OWN_ERROR` times that error (a
kernel as accurate as CPU's, erring the other way), as the gradient check does for
float16/bfloat16 gradients (engine/gradients.py). The op's own multiplier is not used: a large
reduction is judged as tightly as CPU is accurate. Where the float64 run fails, the op's
tolerance stands.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine.compare import TOLERANCES, Scale
from conformance.engine.exactness import FLOATS, wide_args
from conformance.engine.operands import data_args
from conformance.engine.placing import PlacedCall

OWN_ERROR = 2.0


def _floating(leaves: list[Any]) -> list[torch.Tensor]:
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.dtype in FLOATS]


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| over the elements where both are finite (sparse results densified:
    CPU's sparse kernels lack isfinite)."""
    a, b = (t.to_dense() if t.layout != torch.strided else t for t in (a, b))
    if a.shape != b.shape:
        return 0.0  # the call in float64 gave another shape: no distance to measure
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    both = torch.isfinite(a64) & torch.isfinite(b64)
    return float((a64 - b64).abs()[both].max()) if bool(both.any()) else 0.0


def measured_scale(
    op: Any, schema: Any, placed: PlacedCall, expected: Any, written: list[torch.Tensor]
) -> Scale | None:
    """The tolerance multipliers of this sample: per floating result dtype, the base rtol and an
    atol raised by `OWN_ERROR` times CPU's own error (None: nothing floating to measure, or the
    float64 run failed). `expected`: CPU's result; `written`: CPU's written arguments after the
    call, in schema order."""
    results = _floating(tree_flatten(expected)[0]) + _floating(written)
    if not results:
        return None
    fresh = placed.materialize("cpu")
    data = {i for i, _ in data_args(schema)}
    args, kwargs = wide_args(fresh.args, fresh.kwargs, data, results[0].dtype)
    wide_written = [view for leaf, _, view in _wide_bases(fresh, args, kwargs) if leaf.written]
    try:
        wide = tree_flatten(op(*args, **kwargs))[0]
    except Exception:  # noqa: BLE001 - no float64 run: the op's tolerance stands
        return None
    truth = _floating(wide) + [t for t in wide_written if t.dtype == torch.float64]
    if len(truth) != len(results):
        return None
    own: dict[torch.dtype, float] = {}
    for cpu, exact in zip(results, truth, strict=True):
        if cpu.shape != exact.shape:
            return None
        own[cpu.dtype] = max(own.get(cpu.dtype, 0.0), _distance(cpu, exact))
    return {d: (1.0, 1.0 + OWN_ERROR * e / TOLERANCES[d][1]) for d, e in own.items()}


def _wide_bases(fresh: Any, args: tuple, kwargs: dict) -> list[tuple[Any, Any, torch.Tensor]]:
    """(leaf, base, the float64 tensor that replaced its view) for each placed argument."""
    by_id = {}
    for o, w in zip(
        tree_flatten((fresh.args, fresh.kwargs))[0], tree_flatten((args, kwargs))[0], strict=True
    ):
        if isinstance(o, torch.Tensor):
            by_id[id(o)] = w
    return [(leaf, base, by_id.get(id(view), view)) for leaf, base, view in fresh.bases]
