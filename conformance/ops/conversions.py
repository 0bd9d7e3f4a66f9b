"""Dtype conversions: `_to_copy` (what `.to(dtype)` and `.type()` reach) and cross-dtype `copy_`,
from the case's dtype into every other (`_to_copy`) and into the case's dtype from every other
(`copy_`), with the values where conversions go wrong:

- float -> narrower float: ties of the target (1 + eps/2 rounds to even, 1 + 3eps/2 up), the
  largest finite value and just past it (max + ulp/2 is a tie that rounds to inf), the target's
  subnormals and the ties between them, values below half its smallest subnormal (to +-0),
  NaN, +-inf, +-0;
- int -> float: integers the float cannot hold (2^p + 1, a tie, rounds to even; 65520 into
  float16 is a tie with inf), the integer type's extremes;
- float -> int: truncation toward zero (2.5 -> 2, -2.5 -> -2, -0.75 -> 0), values just inside
  the integer's range;
- anything -> bool (NaN, -0.0, subnormals, -1), int -> narrower int (wrap-around), bool -> all.

Where C++ leaves CPU's result undefined no value is generated and nothing is judged: a float
NaN, +-inf or a value outside the target integer's range into an integer (for uint8 any
negative value), `UNDEFINED` below. Every other conversion has one right answer (IEEE round to
nearest even, truncation, modular wrap-around): the op specs declare them exact (`exact=True`),
so the device must match CPU bit for bit (the `rounding` check, engine/bits.py).
"""

from __future__ import annotations

import math

import torch

from conformance.engine.calls import Call
from conformance.engine.exactness import FLOATS
from conformance.ops import OpSpec, register

DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)
UNDEFINED = (
    "float -> integer of NaN, +-inf or a value outside the integer's range (uint8: any negative "
    "value): undefined behaviour in C++, CPU's result is whatever the compiler emits"
)
# the differentiable conversions first: whether an op gets -grad cases is asked of its first
# samples (harness/modes.py)
_FLOATS_FIRST = FLOATS + tuple(d for d in DTYPES if d not in FLOATS)


def _mantissa_bits(dtype: torch.dtype) -> int:
    return round(-math.log2(torch.finfo(dtype).eps))


def _float_edges(target: torch.dtype) -> list[float]:
    """Values where rounding into the float `target` goes wrong (in float64)."""
    info = torch.finfo(target)
    eps, tiny, big = info.eps, info.tiny, info.max
    smallest = tiny * eps  # the smallest subnormal
    ulp_max = big * eps / (2 - eps)  # the spacing just below max: 2^(emax - p)
    edges = [1 + eps / 2, 1 + 3 * eps / 2, 1 + eps / 2 + eps / 8, 1 + eps / 4, 2 - eps / 4]
    edges += [big, big + ulp_max / 4, big + ulp_max / 2, big + ulp_max, big * 2]
    edges += [tiny, tiny / 2, smallest, smallest / 2, smallest * 1.5, smallest / 4, tiny * 0.75]
    edges += [1 / 3, 1000.5, 0.1]
    edges += [-e for e in edges]
    return edges + [math.nan, math.inf, -math.inf, 0.0, -0.0]


def _int_edges(target: torch.dtype) -> list[float]:
    """Floats into the integer `target`: truncation and values just inside its range."""
    info = torch.iinfo(target)
    edges = [2.5, -2.5, 0.75, -0.75, 7.75, -0.0, 0.0, 1.0]
    edges += [float(info.max) - 0.5, float(info.max) * 0.999]
    if info.min < 0:
        edges += [float(info.min) + 0.5, float(info.min) * 0.999, -3.5]
    else:
        edges = [e for e in edges if e >= 0 or e == -0.0]
    return edges


def _fits(values: list[float], source: torch.dtype, target: torch.dtype) -> list[float]:
    """The values `source` holds exactly, without those whose conversion is undefined."""
    out = []
    for v in values:
        if source.is_floating_point:
            held = torch.tensor(v, dtype=torch.float64).to(source).item()
            same = (math.isnan(v) and math.isnan(held)) or held == v
            if not same or (math.copysign(1, v) != math.copysign(1, held)):
                continue
        elif not (math.isfinite(v) and v == int(v)):
            continue
        if not target.is_floating_point and target != torch.bool and source.is_floating_point:
            info = torch.iinfo(target)
            if not math.isfinite(v) or not info.min - 1 < v < info.max + 1:
                continue  # undefined behaviour (UNDEFINED)
            if info.min == 0 and v < 0 and v != 0:
                continue
        out.append(v)
    return out


def _integer_values(source: torch.dtype, target: torch.dtype) -> list[int]:
    """Integers of `source` (also bool) worth converting into `target`."""
    if source == torch.bool:
        return [0, 1]
    info = torch.iinfo(source)
    values = [0, 1, -1, 2, 255, 256, 300, -129, 127, 128, 32767, 32768, 65519, 65520, 65535]
    if target.is_floating_point:
        p = _mantissa_bits(target)
        values += [2**p + 1, 2**p + 3, 2 ** (p + 1) + 2, -(2**p) - 1, 2**31 - 1, 2**24 + 1]
    values += [info.max, info.min, info.max - 1, info.min + 1]
    return sorted({v for v in values if info.min <= v <= info.max})


def edge_values(source: torch.dtype, target: torch.dtype) -> torch.Tensor:
    """A 1-D tensor of `source` values whose conversion into `target` is defined and telling."""
    if not source.is_floating_point:
        return torch.tensor(_integer_values(source, target), dtype=torch.int64).to(source)
    if target.is_floating_point:
        candidates = _float_edges(target) + _float_edges(source)
    elif target == torch.bool:
        sub = torch.finfo(source).tiny / 4
        candidates = [0.0, -0.0, math.nan, 0.5, -1.0, sub, math.inf, -math.inf, 2.0]
    else:
        candidates = _int_edges(target)
    values = _fits(candidates, source, target)
    return torch.tensor(values, dtype=torch.float64).to(source)


def _to_copy_samples(dtype: torch.dtype) -> list[Call]:
    """The case's dtype into every other."""
    if dtype not in DTYPES:
        return []
    return [
        Call("_to_copy", (edge_values(dtype, target),), {"dtype": target})
        for target in _FLOATS_FIRST
        if target != dtype
    ]


def _copy_samples(dtype: torch.dtype) -> list[Call]:
    """Every other dtype into the case's (`self` has the case's dtype)."""
    if dtype not in DTYPES:
        return []
    out = []
    for source in _FLOATS_FIRST:
        if source != dtype:
            src = edge_values(source, dtype)
            out.append(Call("copy_", (torch.zeros(src.shape, dtype=dtype), src)))
    return out


NOTE = "conversions: exact (round to nearest even, truncation, wrap-around); " + UNDEFINED
# no value sets: the edges above are the special values of a conversion, and the generated ones
# would put NaN and inf into integers (undefined)
for _overload, _samples in (("_to_copy", _to_copy_samples), ("copy_", _copy_samples)):
    register(OpSpec(_overload, samples=_samples, exact=True, value_sets=(), notes=NOTE))
