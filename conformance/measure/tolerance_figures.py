"""The figures of the tolerance tool (`tolerances.py`): one comparison's, one row's, the table.

`measure` compares two tensors under the base tolerance of the compared dtype
(compare.TOLERANCES): the largest absolute and relative differences and the multipliers of that
tolerance they imply (`x`: rtol and atol together, `xr`: rtol alone, `xa`: atol alone), and how
far they are over what the op spec allows. A `Row` adds up one (sample dtype, compared dtype) of
an overload: its layout differences per sample (those beyond SELF_TOLERANCE x the spec's
tolerance are CPU bugs, counted apart) and its distance from float64, and what a kernel as
accurate as CPU's needs. `report` prints an overload's rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from conformance.engine import consistency
from conformance.engine.compare import TOLERANCES, same_values, tolerance
from conformance.ops import OpSpec, spec_for

__all__ = ["Figures", "Row", "measure", "report"]


@dataclass
class Figures:
    """The largest differences of one comparison and the multipliers of the base tolerance of the
    compared dtype they imply: `x` for rtol and atol together, `xr` for rtol alone (atol at its
    base), `xa` for atol alone (rtol at its base); `over` the same against the op spec's
    tolerance (> 1: the spec is too tight)."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    x: float = 0.0
    xr: float = 0.0
    xa: float = 0.0
    over: float = 0.0
    nonfinite: int = 0  # elements finite on one side only (left out of the figures)
    samples: int = 0
    where: str = ""  # the value and sample with the largest x

    def merge(self, other: Figures) -> None:
        if other.x > self.x or not self.where:
            self.where = other.where
        for name in ("max_abs", "max_rel", "x", "xr", "xa", "over"):
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        self.nonfinite += other.nonfinite
        self.samples += other.samples


@dataclass
class Row:
    """One (sample dtype, compared dtype) of one overload."""

    samples: int = 0
    exact: Figures = field(default_factory=Figures)  # contiguous copies against float64
    exact2: Figures = field(default_factory=Figures)  # the same, differences doubled
    per_layout: list[Figures] = field(default_factory=list)  # per sample: layout vs contiguous

    def add(self, other: Row) -> None:
        self.samples += other.samples
        self.exact.merge(other.exact)
        self.exact2.merge(other.exact2)
        self.per_layout += other.per_layout

    def split(self) -> tuple[Figures, Figures]:
        """(layout differences, CPU bugs): what the suite reports as a torch bug
        (engine/consistency.py: beyond SELF_TOLERANCE x the spec's tolerance) is no matter of
        tolerance."""
        drift, bugs = Figures(), Figures()
        for f in self.per_layout:
            bug = f.nonfinite or f.over > consistency.SELF_TOLERANCE
            (bugs if bug else drift).merge(f)
        return drift, bugs

    def needs(self) -> tuple[float, float, float]:
        """Multipliers (together, rtol alone, atol alone) a kernel as accurate as CPU's needs."""
        drift = self.split()[0]
        x, xr, xa = (
            max(1.0, getattr(drift, n), getattr(self.exact2, n)) for n in ("x", "xr", "xa")
        )
        return x, xr, xa

    def over(self) -> float:
        return max(self.split()[0].over, self.exact2.over)


def measure(
    actual: torch.Tensor,
    expected: torch.Tensor,
    allowed: tuple[float, float],
    factor: float = 1.0,
    where: str = "",
) -> Figures:
    """Figures of `actual` against `expected` (differences times `factor`) under the base
    tolerance of `actual`'s dtype, and under `allowed` (rtol, atol) for `over`."""
    rtol, atol = TOLERANCES[actual.dtype]
    wide = torch.complex128 if actual.is_complex() or expected.is_complex() else torch.float64
    a = actual.detach().reshape(-1).to(wide)
    e = expected.detach().reshape(-1).to(wide)
    same = same_values(a, e)
    finite = a.isfinite() & e.isfinite()
    out = Figures(nonfinite=int((~same & ~finite).sum()), samples=1, where=where)
    keep = ~same & finite
    if not bool(keep.any()):
        return out
    diff, mag = (a - e).abs()[keep] * factor, e.abs()[keep]
    out.max_abs = float(diff.max())
    big = mag > atol
    out.max_rel = float((diff[big] / mag[big]).max()) if bool(big.any()) else 0.0
    out.x = float((diff / (atol + rtol * mag)).max())
    out.xr = _ratio((diff - atol).clamp_min(0), rtol * mag)
    out.xa = _ratio((diff - rtol * mag).clamp_min(0), torch.full_like(mag, atol))
    out.over = _ratio(diff, allowed[1] + allowed[0] * mag)
    return out


def _ratio(num: torch.Tensor, den: torch.Tensor) -> float:
    """max(num / den), 0/0 counting as 0 and n/0 as infinite."""
    return float(torch.where(num > 0, num / den, torch.zeros_like(num)).max())


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.2g}"


def _allowed(dtype: torch.dtype, spec: OpSpec) -> str:
    """What the spec allows for `dtype`, as multipliers of the base tolerance."""
    base_r, base_a = TOLERANCES[dtype]
    rtol, atol = tolerance(dtype, spec.tol_scale)
    r, a = rtol / base_r, atol / base_a
    return f"x{r:.3g}" if math.isclose(r, a) else f"r{r:.3g} a{a:.3g}"


def report(overload: str, rows: dict[str, Row], notes: list[str]) -> Iterator[str]:
    """The printed lines of one overload."""
    spec = spec_for(overload)
    yield f"{overload}: tol_scale {spec.tol_scale!r}"
    yield from (f"  {note}" for note in notes)
    if not rows:
        return
    yield (
        f"  {'dtype':<17}{'n':>4}  {'layouts: abs':>12} {'rel':>7} {'x':>7}"
        f"  {'float64: abs':>12} {'rel':>7} {'x':>7}  {'needs: x':>8} {'r':>7} {'a':>7}  spec"
    )
    for label, row in rows.items():
        compared = getattr(torch, label.rpartition(">")[2])
        (lo, bugs), ex = row.split(), row.exact
        x, xr, xa = row.needs()
        over = row.over()
        flag = f" ! (x{_fmt(over)} too tight)" if over > 1 else ""
        yield (
            f"  {label:<17}{row.samples:>4}  {_fmt(lo.max_abs):>12} {_fmt(lo.max_rel):>7} "
            f"{_fmt(lo.x):>7}  {_fmt(ex.max_abs):>12} {_fmt(ex.max_rel):>7} {_fmt(ex.x):>7}  "
            f"{_fmt(x):>8} {_fmt(xr):>7} {_fmt(xa):>7}  {_allowed(compared, spec)}{flag}"
        )
        for what, figs in (("layouts", lo), ("float64", ex)):
            if figs.x >= 0.5:
                yield (
                    f"      worst {what} x{_fmt(figs.x)} (r{_fmt(figs.xr)} a{_fmt(figs.xa)}): "
                    f"{figs.where}"
                )
            if figs.nonfinite:
                yield f"      {what}: {figs.nonfinite} elements finite on one side only (left out)"
        if bugs.samples:
            yield (
                f"      cpu bug (a torch-bug in a run, left out): {bugs.samples} samples differ "
                f"from contiguous copies up to x{_fmt(bugs.x)} (max abs {_fmt(bugs.max_abs)}, "
                f"{bugs.nonfinite} non-finite), e.g. {bugs.where}"
            )
