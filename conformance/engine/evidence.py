"""Tolerances from evidence: CPU's own error against float64, measured per sample.

An op's tolerance (engine/compare.py, widened per op by measured multipliers) is set for its
small samples. At 65,537 reduced elements it is both too loose and too tight in places: CPU's
cascade sum of float32 is accurate to a few ulps however long the row, while a bfloat16 sum that
accumulates in bfloat16 is off by 87 %. The -sizes cases therefore judge each sample by what CPU
achieves on it: the op is run again on CPU with every floating operand in float64 (integer data
operands converted to the result's dtype first, as type promotion does, and a floating
`dtype=` argument in float64 too), CPU's distance from that result is its own error, measured
per compared value (each output, each written argument: never pooled across them) and per
element (pointwise ops) or per region of `REGION` neighbours (reductions, scans, products),
and the device may differ from CPU there by the dtype's base tolerance plus `OWN_ERROR` times
that error (a kernel as accurate as CPU's, erring the other way), as the gradient check does
for float16/bfloat16 gradients (engine/grad_compare.py). A small exp beside a large one, a saved
mean beside an inverse std, keeps its own allowance. The op's own multiplier is not used: a large
reduction is judged as tightly as CPU is accurate. Where the float64 run fails, the op's
tolerance stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import accumulation, ieee
from conformance.engine.compare import TOLERANCES, Scale
from conformance.engine.exactness import FLOATS, wide_args
from conformance.engine.operands import data_args
from conformance.engine.placing import PlacedCall
from conformance.engine.truth import output_name

OWN_ERROR = 2.0


def _floating(leaves: list[Any]) -> list[torch.Tensor]:
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.dtype in FLOATS]


def measured_scale(
    op: Any,
    schema: Any,
    placed: PlacedCall,
    expected: Any,
    written: Mapping[str, torch.Tensor],
    overload: str = "",
) -> Scale | None:
    """The tolerance of this sample from CPU's own error (an `Evidence`; None: nothing floating
    to measure, or the float64 run failed). `expected`: CPU's result; `written`: CPU's written
    arguments after the call, by argument name, in schema order; `overload` says whether the op
    is pointwise (its errors judged element by element, else by region)."""
    results = _floating(tree_flatten(expected)[0]) + _floating(list(written.values()))
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
    names = _names(expected, written)
    pointwise = bool(overload) and ieee.pointwise(overload)
    order = accumulation_bound(op, overload, args, kwargs, results[0])
    own: dict[torch.dtype, float] = {}
    elements: dict[str, torch.Tensor] = {}
    for i, (name, cpu, exact) in enumerate(zip(names, results, truth, strict=True)):
        if cpu.shape != exact.shape:
            return None
        error = element_errors(cpu, exact)
        own[cpu.dtype] = max(own.get(cpu.dtype, 0.0), float(error.max()) if error.numel() else 0.0)
        elements[name] = OWN_ERROR * (error if pointwise else regions(error))
        if i == 0 and order is not None and order.shape == error.shape:
            elements[name] = torch.maximum(elements[name], order)
    pooled = {d: (1.0, 1.0 + OWN_ERROR * e / TOLERANCES[d][1]) for d, e in own.items()}
    return Evidence(pooled, elements)


def accumulation_bound(
    op: Any, overload: str, args: tuple, kwargs: dict, result: torch.Tensor
) -> torch.Tensor | None:
    """Per element of a sum, a scan or a mean, the error any order of accumulation probably
    stays within (engine/accumulation.py `probable_bound`; issue 79: a float32 cumsum with one
    sequential float32 accumulator failed its -sizes case at 3.95e-6, judged by CPU's wider
    accumulation). None for any other op. `args`: the float64 call."""
    if not overload or ieee.base(overload) not in accumulation.SUMS:
        return None  # products have no such allowance here: their -sizes judged as before
    found = accumulation.magnitudes(op, overload, args, kwargs)
    if found is None:
        return None
    return accumulation.probable_bound(*found, result.dtype)


class Evidence(dict):
    """A sample's tolerance from evidence: as a Scale ({dtype: multiplier}) CPU's largest own
    error over the values of each dtype, for the checks that ask one (rtol, atol); and per
    compared value (by the name the checks give it: "output", "output 1", a written argument),
    the allowance of each element beyond the base tolerance: `OWN_ERROR` times CPU's own error
    at that element (pointwise ops: each element is its own computation) or in its region (the
    largest over `REGION` neighbours on each side: a reduction's or a scan's error moves with
    the order of summation, not element by element). A saved mean's allowance is never its
    inverse std's, nor a small exp's the largest one's."""

    def __init__(self, pooled: dict[torch.dtype, tuple[float, float]], elements: dict) -> None:
        super().__init__(pooled)
        self.elements: dict[str, torch.Tensor] = elements


REGION = 32


def element_errors(cpu: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|cpu - exact| per element (float64), 0 where either is not finite."""
    a, b = (t.to_dense() if t.layout != torch.strided else t for t in (cpu, exact))
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    both = torch.isfinite(a64) & torch.isfinite(b64)
    return torch.where(both, (a64 - b64).abs(), torch.zeros_like(a64))


def regions(error: torch.Tensor) -> torch.Tensor:
    """Each element's largest error within `REGION` elements of it (flattened order)."""
    if error.numel() <= 1:
        return error
    flat = error.reshape(1, 1, -1)
    pooled = torch.nn.functional.max_pool1d(flat, 2 * REGION + 1, stride=1, padding=REGION)
    return pooled.reshape(error.shape)


def _names(expected: Any, written: Mapping[str, torch.Tensor]) -> list[str]:
    """The names the checks compare the floating results under (outputs by flat position,
    written arguments by name), in `_floating(...)` order."""
    leaves = tree_flatten(expected)[0]
    names = [
        output_name(i, len(leaves))
        for i, t in enumerate(leaves)
        if isinstance(t, torch.Tensor) and t.dtype in FLOATS
    ]
    return names + [n for n, t in written.items() if t.dtype in FLOATS]


def _wide_bases(fresh: Any, args: tuple, kwargs: dict) -> list[tuple[Any, Any, torch.Tensor]]:
    """(leaf, base, the float64 tensor that replaced its view) for each placed argument."""
    by_id = {}
    for o, w in zip(
        tree_flatten((fresh.args, fresh.kwargs))[0], tree_flatten((args, kwargs))[0], strict=True
    ):
        if isinstance(o, torch.Tensor):
            by_id[id(o)] = w
    return [(leaf, base, by_id.get(id(view), view)) for leaf, base, view in fresh.bases]
