"""Compare one device tensor with its CPU reference: dtype, shape, strides, values.

Tolerances: `TOLERANCES` gives the base (rtol, atol) of each dtype; an op spec may widen them with
`OpSpec.tol_scale`, a `Scale` that `tolerance` turns into the (rtol, atol) of one dtype. A
multiplier is a float (rtol and atol alike) or an (rtol, atol) pair of multipliers, and it holds
only for the dtype it was measured on (`python -m conformance.measure.tolerances` measures it):

- a mapping {dtype: multiplier} gives each dtype it names its base times its multiplier;
- a bare multiplier was measured in single precision: it applies as given to float32 and
  complex64 (`MEASURED`) only;
- every other floating dtype (float16, bfloat16, float64, complex128 under a bare multiplier; any
  dtype a mapping does not name) is derived from the single-precision multiplier `s` (the bare
  one, or the mapping's float32 entry, else 1) by its precision: `max(base, s * base(float32) *
  eps(c) / eps(float32))`, `c` the dtype its kernels compute in (`COMPUTE_DTYPE`: float32 for
  float16/bfloat16, which accumulate in float32 and round once). So float16/bfloat16 inherit
  float32's accumulation error, far below their own rounding, and their loose base is never
  multiplied unless a measurement for that dtype says so; float64's base (1e-7, ~1e9 ULPs) is
  out of reach of anything a float32 measurement implies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from conformance.engine.transfer import read_back

# (rtol, atol) per dtype, as torch.testing.assert_close; integer and bool types compare exactly.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
#: the dtypes a bare multiplier applies to as given (where it was measured)
MEASURED = (torch.float32, torch.complex64)
#: the dtype a kernel of a reduced-precision dtype computes in (torch's opmath type)
COMPUTE_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}

#: a tolerance multiplier: rtol and atol alike, or (rtol multiplier, atol multiplier)
Multiplier = float | tuple[float, float]
#: an op's multiplier(s): a bare one (measured on float32/complex64) or {dtype: multiplier}
Scale = Multiplier | Mapping[torch.dtype, Multiplier]


class Mismatch(Exception):
    """A failed check: `check` names it (values, dtype, strides, ...), the message says how."""

    def __init__(
        self, check: str, message: str, max_abs: float | None = None, max_rel: float | None = None
    ) -> None:
        super().__init__(message)
        self.check = check
        self.message = message
        self.max_abs = max_abs
        self.max_rel = max_rel


@dataclass
class ErrorStats:
    max_abs: float = 0.0
    max_rel: float = 0.0

    def update(self, abs_err: float, rel_err: float) -> None:
        self.max_abs = max(self.max_abs, abs_err)
        self.max_rel = max(self.max_rel, rel_err)


def tolerance(dtype: torch.dtype, scale: Scale = 1.0) -> tuple[float, float]:
    """(rtol, atol) of `dtype` under an op's multiplier(s) (see the module docstring); (0, 0),
    exact, for integer and bool dtypes whatever the scale."""
    if dtype not in TOLERANCES:
        return 0.0, 0.0
    rtol, atol = TOLERANCES[dtype]
    if isinstance(scale, Mapping):
        if dtype in scale:
            r, a = _pair(scale[dtype])
            return rtol * r, atol * a
        r, a = _pair(scale.get(torch.float32, 1.0))
    else:
        r, a = _pair(scale)
        if dtype in MEASURED:
            return rtol * r, atol * a
    ratio = torch.finfo(COMPUTE_DTYPE.get(dtype, dtype)).eps / torch.finfo(torch.float32).eps
    rtol32, atol32 = TOLERANCES[torch.float32]
    return max(rtol, r * rtol32 * ratio), max(atol, a * atol32 * ratio)


def _pair(m: Multiplier) -> tuple[float, float]:
    return (float(m[0]), float(m[1])) if isinstance(m, tuple) else (float(m), float(m))


def subnormal(t: torch.Tensor) -> torch.Tensor:
    """Where the floating `t` holds a subnormal value."""
    return (t != 0) & (t.abs() < torch.finfo(t.dtype).tiny)


def flush_subnormals(t: torch.Tensor, device: torch.Tensor | None = None) -> torch.Tensor:
    """`t` with its subnormal elements replaced by a zero of their sign (a device that flushes
    them, as the manifest may declare: FTZ), or `t` itself where it has none. With `device`
    (the device's values, on CPU): only where the device gave a zero (a declared flush permits,
    it does not demand)."""
    if not t.is_floating_point() or t.layout != torch.strided or not t.numel():
        return t
    sub = subnormal(t)
    if device is not None and device.shape == t.shape:
        sub &= device == 0
    return t.masked_fill(sub, 0.0).copysign(t) if bool(sub.any()) else t


_SAME_WIDTH_INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def identical(a: torch.Tensor, e: torch.Tensor) -> bool:
    """Every element of `a` has the bits of `e`'s (tensors of one dtype and shape on the CPU):
    one comparison, where nothing finer is left to judge (NaN payloads and the sign of zero
    included)."""
    if a.dtype != e.dtype or a.shape != e.shape:
        return False
    if a.layout != torch.strided or e.layout != torch.strided:
        return False
    return same_bits(a, e)


def same_bits(a: torch.Tensor, e: torch.Tensor) -> bool:
    """`identical` for tensors known to share dtype and shape, both strided (the pairs the bit
    checks and CPU's self-comparison make: asked of every sample)."""
    ints = _SAME_WIDTH_INTS.get(e.element_size())
    if ints is None or a.is_neg() or e.is_neg():
        return False
    return torch.equal(a.view(ints), e.view(ints))


def significant_strides(t: torch.Tensor) -> tuple[int | None, ...]:
    """Strides of dims with more than one element (others cannot be observed)."""
    if t.numel() == 0:
        return ()
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride(), strict=True))


def _difference(actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(|actual - expected| in float64, flat, where equal elements and NaN against NaN give 0 and
    NaN against a number inf; whether each element differs)."""
    a = actual.detach().reshape(-1)
    e = expected.detach().reshape(-1)
    if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
        bad = a != e
        diff = (a.to(torch.float64) - e.to(torch.float64)).abs() if a.dtype != torch.bool else bad
        return diff.to(torch.float64), bad
    a64, e64 = (
        a.to(torch.complex128 if a.is_complex() else torch.float64),
        e.to(torch.complex128 if e.is_complex() else torch.float64),
    )
    both_nan = a64.isnan() & e64.isnan()
    diff = (a64 - e64).abs().masked_fill(both_nan, 0).nan_to_num(nan=float("inf"))
    return diff, diff > 0


def _largest(diff: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(max abs error, max rel error) of a `_difference`."""
    e = expected.detach().reshape(-1)
    denom = e.to(torch.float64).abs() if not e.is_complex() else e.abs().to(torch.float64)
    rel = (diff / denom.clamp_min(1e-300)).masked_fill(diff == 0, 0)
    return float(diff.max()), float(rel.max())


def max_errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(max abs error, max rel error): what a passing comparison records (ErrorStats), without
    counting or locating the differing elements."""
    if actual.numel() == 0:
        return 0.0, 0.0
    return _largest(_difference(actual, expected)[0], expected)


def errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float, int, int]:
    """(max abs error, max rel error, number of mismatched elements, first bad flat index)."""
    if actual.numel() == 0:
        return 0.0, 0.0, 0, -1
    diff, bad = _difference(actual, expected)
    nbad = int(bad.sum())
    first = int(bad.nonzero()[0, 0]) if nbad else -1
    return *_largest(diff, expected), nbad, first


def unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The index of flat position `flat` in `shape` (torch.unravel_index imports sympy: seconds
    on the first failure of every process)."""
    out = []
    for n in reversed(shape):
        flat, i = divmod(flat, n) if n else (flat, 0)
        out.append(i)
    return out[::-1]


def compare_values(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    tol_scale: Scale,
    stats: ErrorStats,
    *,
    widen: float = 1.0,
) -> None:
    """Raise Mismatch('values') unless actual (on CPU) matches expected within the tolerance of
    its dtype under `tol_scale`, times `widen` (CPU against itself: consistency.py)."""
    if actual.layout != torch.strided or expected.layout != torch.strided:
        actual, expected = actual.to_dense(), expected.to_dense()
    if actual.shape != expected.shape:  # the tensor's shape was checked: its data is not that
        raise Mismatch(
            "shape",
            f"{name}: read back with shape {list(actual.shape)}, cpu gives {list(expected.shape)}",
        )
    if actual.numel() == 0:
        return
    dtype = expected.dtype  # the tolerance's, before the conversions below
    if dtype == torch.complex32:  # few CPU kernels take ComplexHalf (not even equal)
        actual, expected = actual.to(torch.complex64), expected.to(torch.complex64)
    quantized = expected.is_quantized
    if quantized:  # quantised values: the integers and the quantisation itself
        if (actual.q_scale(), actual.q_zero_point()) != (
            expected.q_scale(),
            expected.q_zero_point(),
        ):
            raise Mismatch(
                "values",
                f"{name}: quantised with scale {actual.q_scale()}, zero point "
                f"{actual.q_zero_point()}; cpu {expected.q_scale()}, {expected.q_zero_point()}",
            )
        actual, expected = actual.int_repr(), expected.int_repr()
    if torch.equal(actual, expected):  # the common case, one op: no error to measure
        return
    if identical(actual, expected):  # NaNs where CPU has the same NaNs (special values): every
        return  # rule of close_mask holds where the bits are CPU's
    rtol, atol = (0.0, 0.0) if quantized else tolerance(dtype, tol_scale)
    rtol, atol = rtol * widen, atol * widen
    close, rtol, atol = close_mask(actual, expected, tol_scale, name, widen, (rtol, atol))
    ok = bool(close.all())
    abs_err, rel_err = max_errors(actual, expected)
    stats.update(abs_err, rel_err)
    if ok:
        return
    first = int((~close).reshape(-1).nonzero()[0, 0])
    nbad = int((~close).sum())
    idx = unravel(first, tuple(expected.shape))
    got = actual.reshape(-1)[first].item()
    want = expected.reshape(-1)[first].item()
    raise Mismatch(
        "values",
        f"{name}: {nbad}/{expected.numel()} elements differ (max abs {abs_err:.3g}, "
        f"max rel {rel_err:.3g}, rtol {rtol:g}, atol {atol:g}); first at {idx}: "
        f"device {got!r} vs cpu {want!r}",
        abs_err,
        rel_err,
    )


def equal_values(a: torch.Tensor, e: torch.Tensor) -> bool:
    """Whether every element of `a` equals `e`'s or both are NaN (`same_values` everywhere):
    torch.equal, then the bits (`identical`: a NaN never equals itself, its bits do), each one
    op, before the mask."""
    if torch.equal(a, e) or identical(a, e):
        return True
    return bool(same_values(a, e).all())


def same_values(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Where `a` equals `e`, or both are NaN (the sign of zero and NaN payloads aside)."""
    return (a == e) | (a.isnan() & e.isnan())


def close_mask(
    actual: torch.Tensor,
    expected: torch.Tensor,
    tol_scale: Scale,
    name: str,
    widen: float = 1.0,
    tol: tuple[float, float] | None = None,
) -> tuple[torch.Tensor, float, float]:
    """(where `actual` is within the tolerance of `expected`, rtol, atol for a message): the
    dtype's tolerance under `tol_scale` (or `tol`, already widened), or, where evidence measured
    CPU's own error for the value `name`, the base tolerance plus that error per element. The
    one rule of "close": the values check and every excuse of a value beyond it ask it."""
    if tol is None:
        rtol, atol = tolerance(expected.dtype, tol_scale)
        rtol, atol = rtol * widen, atol * widen
    else:
        rtol, atol = tol
    own = _element_allowance(tol_scale, name, expected)
    if own is not None:  # evidence per element: the base tolerance plus CPU's own error there
        base_rtol, atol = TOLERANCES[expected.dtype]
        rtol = base_rtol * widen
        bound = atol * widen + own * widen + rtol * expected.to(torch.float64).abs()
        close = (actual.to(torch.float64) - expected.to(torch.float64)).abs() <= bound
        close |= same_values(actual, expected)
        atol = float(atol + own.max())  # for the message: the largest allowance
    elif rtol == 0 and atol == 0:
        close = same_values(actual, expected)
    else:
        close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    return close, rtol, atol


def _element_allowance(tol_scale: Scale, name: str, expected: torch.Tensor) -> torch.Tensor | None:
    """The per-element allowance beyond the base tolerance that evidence measured for the
    value `name` (engine/evidence.py), where it has one of this shape; else None."""
    own = getattr(tol_scale, "elements", {}).get(name)
    if own is None or own.shape != expected.shape or expected.dtype not in TOLERANCES:
        return None
    if expected.is_complex():
        return None
    return own


def compare_tensor(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    device_type: str,
    check_strides: bool,
    check_values: bool,
    tol_scale: Scale,
    stats: ErrorStats,
    read: Callable[[torch.Tensor], torch.Tensor] = read_back,
) -> None:
    """All metadata and value checks for one output tensor (`read`: how the device's values
    are read, `read_back` or a sample's shared copy)."""
    if actual.device.type != device_type:
        raise Mismatch("device", f"{name}: on {actual.device}, expected the {device_type} device")
    if actual.dtype != expected.dtype:
        raise Mismatch("dtype", f"{name}: dtype {actual.dtype}, cpu gives {expected.dtype}")
    if actual.shape != expected.shape:
        raise Mismatch(
            "shape", f"{name}: shape {list(actual.shape)}, cpu gives {list(expected.shape)}"
        )
    if actual.layout != expected.layout:
        raise Mismatch("shape", f"{name}: layout {actual.layout}, cpu gives {expected.layout}")
    if expected.layout != torch.strided:  # sparse & co.: compared as dense values
        if check_values:
            dense = read(actual).to_dense()
            compare_values(name, dense, expected.to_dense(), tol_scale, stats)
        return
    if (
        check_strides
        and actual.stride() != expected.stride()  # the same shape: no stride differs
        and significant_strides(actual) != significant_strides(expected)
    ):
        raise Mismatch(
            "strides",
            f"{name}: strides {actual.stride()}, cpu gives "
            f"{expected.stride()} (shape {list(expected.shape)})",
        )
    if check_values:
        compare_values(name, read(actual), expected, tol_scale, stats)
