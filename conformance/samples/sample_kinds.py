"""What a captured sample is besides its values, for choosing among them: its kind (ordinary,
special values, type promotion), its shape of call, and a varied few of many (samples/opinfo.py
captures; the -reference case keeps the first few)."""

from __future__ import annotations

from typing import Any

import torch

from conformance.engine.exactness import FLOATS, magnitudes


def varied(candidates: list[tuple[int, Any]], n: int) -> list[tuple[int, Any]]:
    """Up to `n` candidates: first one of each set of keyword arguments (`alpha=-3.125`), then
    one of each other shape of the call (a broadcast, a number operand, another rank), then the
    rest in order (the -reference case keeps the first few)."""
    tiers: tuple[list, list, list] = ([], [], [])
    keywords: set[str] = set()
    shapes: set[str] = set()
    for i, sample in candidates:
        said, shape = repr(sorted(sample.kwargs.items())), _arguments(sample)
        tier = 0 if said not in keywords else 1 if shape not in shapes else 2
        tiers[tier].append((i, sample))
        keywords.add(said)
        shapes.add(shape)
    return (tiers[0] + tiers[1] + tiers[2])[:n]


def _arguments(sample) -> str:
    """A sample's arguments that are not tensor values: numbers, options, tensor ranks."""

    def part(x) -> str:
        return f"T{x.dim()}" if isinstance(x, torch.Tensor) else repr(x)

    args = ",".join(part(a) for a in sample.args)
    return f"{part(sample.input)}|{args}|{sorted((k, part(v)) for k, v in sample.kwargs.items())}"


def shape_of(sample) -> str:
    """What a sample is besides its values: its tensors' shapes, strides and dtypes and its
    other arguments (a reference input with the same is one of sample_inputs' again)."""

    def part(x) -> str:
        if isinstance(x, torch.Tensor):
            return f"T{tuple(x.shape)}{x.stride()}{x.dtype}"
        if isinstance(x, list | tuple):
            return "[" + ",".join(part(y) for y in x) + "]"
        return repr(x)

    kwargs = ",".join(f"{k}={part(v)}" for k, v in sorted(sample.kwargs.items()))
    return f"{part(sample.input)}|{part(list(sample.args))}|{kwargs}"


def sample_kind(sample, dtype: torch.dtype) -> str:
    """ "promotion" when a sample mixes dtypes, "special" when it holds NaN, infinities,
    subnormals or dtype extremes, else "samples"."""
    leaves = [sample.input, *sample.args, *sample.kwargs.values()]
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    # a number operand (x + 2.5); later numbers are dims, sizes, ...
    operand = sample.args[0] if sample.args else None
    mixed_number = isinstance(operand, int | float) and not isinstance(operand, bool)
    # bool tensors of a non-bool op are masks or conditions, not operands
    operands = [t for t in tensors if t.dtype != torch.bool or dtype == torch.bool]
    if any(t.dtype != dtype for t in operands) or (
        mixed_number and isinstance(operand, float) != dtype.is_floating_point
    ):
        return "promotion"
    if any(is_special(t) for t in tensors if t.dtype == dtype):
        return "special"
    return "samples"


def is_special(t: torch.Tensor) -> bool:
    """Whether a tensor holds a value kernels get wrong: NaN, +-inf, subnormals, extremes."""
    if t.numel() == 0 or t.dtype == torch.bool:
        return False
    if t.dtype in FLOATS:
        return _special_bits(t)
    if t.is_floating_point():
        info = torch.finfo(t.dtype)
        a = t.abs()
        return bool(
            (~torch.isfinite(t)).any()
            or (a >= info.max / 2).any()
            or ((a < info.tiny) & (a > 0)).any()
        )
    if t.is_complex():
        return False
    info = torch.iinfo(t.dtype)
    return bool(((t == info.max) | (t == info.min)).any())


def _special_bits(t: torch.Tensor) -> bool:
    """`is_special` of an IEEE tensor on its bits, in integer passes (a sample scan looked at
    tensors of a million float16 elements with abs, isfinite and comparisons, a tenth of a cold
    capture): |x| >= max/2 (inf and NaN above it) and 0 < |x| < tiny (subnormal) compare the
    magnitudes' bits with those of max/2 and tiny."""
    info = torch.finfo(t.dtype)
    magnitude = magnitudes(t)
    half_max = magnitudes(torch.tensor(info.max / 2, dtype=t.dtype)).item()
    tiny = magnitudes(torch.tensor(info.tiny, dtype=t.dtype)).item()
    return bool((magnitude >= half_max).any() or ((magnitude > 0) & (magnitude < tiny)).any())
