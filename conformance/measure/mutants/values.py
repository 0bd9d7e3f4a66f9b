"""Value transforms of the mutation operators: each takes a result read back to CPU (contiguous)
and returns what a wrong kernel would have written there, same dtype and shape. A transform
that has nothing to change (no float result, no NaN to turn into 0) returns its input, and the
mutant is then equivalent on that call."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from conformance.engine import exactness, oracles

Transform = Callable[[torch.Tensor], torch.Tensor]

_INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def floating(t: torch.Tensor) -> bool:
    return t.is_floating_point() and t.element_size() in _INTS


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INTS[t.element_size()])


def ulps(k: int, every: int = 1) -> Transform:
    """Every `every`-th finite nonzero element `k` ulps away from zero."""

    def transform(t: torch.Tensor) -> torch.Tensor:
        if not floating(t):
            return t
        bits = _bits(t)
        chosen = _every(t, every) & (t != 0) & t.isfinite()
        moved = torch.where(chosen, bits + k, bits).view(t.dtype)
        return torch.where(moved.isfinite() | ~chosen, moved, t)  # never past the largest

    return transform


def _every(t: torch.Tensor, every: int) -> torch.Tensor:
    flat = torch.arange(t.numel()).reshape(t.shape)
    return flat % every == every - 1 if every > 1 else torch.ones_like(flat, dtype=torch.bool)


def sign_of_small(fraction: float = 1 / 32) -> Transform:
    """The sign of every nonzero result below `fraction` of the largest magnitude flipped."""

    def transform(t: torch.Tensor) -> torch.Tensor:
        if not floating(t) or t.numel() == 0:
            return t
        finite = t[t.isfinite()]
        if finite.numel() == 0:
            return t
        largest = finite.abs().max()
        small = (t.abs() < largest * fraction) & (t != 0)
        return torch.where(small, -t, t)

    return transform


def nan_to_zero(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t.isnan(), torch.zeros_like(t), t) if t.is_floating_point() else t


def zero_to_nan(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return torch.where(t == 0, torch.full_like(t, float("nan")), t)


def infinity_sign(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t.isinf(), -t, t) if t.is_floating_point() else t


def negative_zero(t: torch.Tensor) -> torch.Tensor:
    """-0.0 written as +0.0."""
    if not t.is_floating_point():
        return t
    return torch.where((t == 0) & t.signbit(), torch.zeros_like(t), t)


def flush_subnormals(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    tiny = torch.finfo(t.dtype).tiny
    return torch.where((t != 0) & (t.abs() < tiny), torch.zeros_like(t) * t.sign(), t)


def off(t: torch.Tensor) -> torch.Tensor:
    """Every element plainly wrong, beyond any tolerance: a finite float x becomes
    x + 1 + |x| (never x), integers + 1, booleans negated; NaN and infinities stay."""
    if t.dtype == torch.bool:
        return ~t
    if t.is_floating_point() or t.is_complex():
        return torch.where(t.isfinite(), t + 1 + t.abs(), t)
    return t + 1


def past(n: int, how: str) -> Transform:
    """The elements past the first `n` (in logical order) wrong (`how` = "wrong") or left as
    they were before the kernel ran (`how` = "unwritten": the caller passes the old contents
    through `before`)."""

    def transform(t: torch.Tensor) -> torch.Tensor:
        return _from(t, n, how) if t.numel() > n else t

    return transform


def last(k: int, how: str) -> Transform:
    """The last `k` elements (in logical order) wrong or left unwritten, as `past`: a grid or
    a tail loop one short."""

    def transform(t: torch.Tensor) -> torch.Tensor:
        return _from(t, max(t.numel() - k, 0), how) if t.numel() else t

    return transform


def _from(t: torch.Tensor, start: int, how: str) -> torch.Tensor:
    flat = t.reshape(-1).clone()
    flat[start:] = off(flat[start:]) if how == "wrong" else UNWRITTEN.before(flat)[start:]
    return flat.reshape(t.shape)


class _Unwritten:
    """What memory held before the kernel wrote it: set by the mutant for the call in flight
    (the written argument's old contents, or garbage for a fresh result: a pattern)."""

    def __init__(self) -> None:
        self.old: torch.Tensor | None = None

    def before(self, flat: torch.Tensor) -> torch.Tensor:
        if self.old is not None and self.old.numel() == flat.numel():
            return self.old.reshape(-1).to(flat.dtype)
        if flat.dtype == torch.bool:
            return torch.zeros_like(flat)
        return torch.full_like(flat, 7) if not flat.is_floating_point() else flat * 0 + 7.5


UNWRITTEN = _Unwritten()


def integers_off(every: int = 8) -> Transform:
    """Every `every`-th element of an integer or boolean result wrong (+1, negated)."""

    def transform(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point() or t.is_complex():
            return t
        return torch.where(_every(t, every), off(t), t)

    return transform


#: a law that moved by D is seen in n draws only past D sqrt(n) > KS_C: Kolmogorov-Smirnov's
#: c(alpha) at the suite's false-alarm rate for random ops (engine/oracles.py)
LAW_RESOLUTION = oracles.KS_C


#: draws that are all integers are an integer law from this many on (one draw of -2.0 is not)
INTEGRAL_LAW = 64
#: ulps a draw of a small call may move and leave its law where it was
LAW_ULPS = 4


def law_shift(old: torch.Tensor, new: torch.Tensor) -> float:
    """How far a random op's draws moved as a law: D sqrt(n), D the largest distance between the
    empirical distributions of the original draws and the rewritten ones (the same draws, so
    nothing of it is sampling noise); infinite where the rewrite left the law's support (integer
    draws made fractional, a finite one made NaN or infinite, a NaN made finite). A call of
    fewer than the oracle's `MIN_DRAWS` draws (which the suite pools with reruns) says how far
    its law moved only where no draw moved more than `LAW_ULPS` ulps: infinite otherwise (one
    draw of 1e30 in place of 0.3 moves its law however few the draws)."""
    a, b = old.reshape(-1).to(torch.float64), new.reshape(-1).to(torch.float64)
    if a.numel() == 0:
        return 0.0
    if not torch.equal(a.isfinite(), b.isfinite()):
        return math.inf
    if a.numel() < oracles.MIN_DRAWS:
        if not old.is_floating_point():
            return math.inf  # an integer draw moved is another value
        moved = exactness.ulp_distance(new.reshape(-1), old.reshape(-1))
        return 0.0 if int(moved.max()) <= LAW_ULPS else math.inf
    finite = a.isfinite() & b.isfinite()
    a, b = a[finite], b[finite]
    integral = a.numel() >= INTEGRAL_LAW and bool((a == a.round()).all())
    if integral and not bool((b == b.round()).all()):
        return math.inf
    if a.numel() == 0:
        return 0.0
    return oracles.ks_statistic(a, b) * math.sqrt(a.numel())


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit equal (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point() and a.element_size() in _INTS:
        return bool(torch.equal(_bits(a.contiguous()), _bits(b.contiguous())))
    if a.is_complex():
        return identical(torch.view_as_real(a), torch.view_as_real(b))
    return bool(torch.equal(a, b))
