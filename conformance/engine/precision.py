"""What a manifest declares about a device's arithmetic in one dtype, and how it moves the verdict.

`DtypePolicy` is the case's share of the manifest's dtype lists (harness/expectations.py):

- `flushes_subnormals` (float16 .. float64): the device flushes subnormal results to zero (FTZ).
  Its values are judged against CPU's with subnormals flushed (`compare.flush_subnormals`); the
  `subnormal` check is silent for the dtype.
- `computes_in_dtype` (float16, bfloat16): the device computes the dtype in the dtype itself, with
  no float32 "opmath" (half-precision units, XLA's reduced-precision lowering). CPU computes those
  dtypes in float32 and rounds once, so a few ulps between the two are policy, not a bug. Where
  the device's values are beyond the dtype's tolerance against CPU's, they are judged against the
  float64 result of the op (the truth: CPU's inputs upcast, `truth.py`) with the
  dtype's own accuracy: the dtype's tolerance (as the op's spec widens it) plus `ROUNDINGS`
  roundings in the dtype at the scale of the computation (eps times the largest |value| among
  the sample's floating inputs and the result). A few steps rounded in the dtype stay within
  that, cancellation included (addcmul of operands near 1 whose result is near 0); a kernel
  that is wrong, or a long sum accumulated in the dtype, does not: that is a finding.
  A case that passes only by that says so in a note ("[note] values computed in float16 ..."):
  never a silent pass. The `rounding` check, which presumes one rounding from a wider
  computation, is silent for the dtype. Gradients are not covered: they are judged as on any
  device (engine/gradients.py), and a backward computed in half shows as `grad` failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from conformance.engine import ieee
from conformance.engine.compare import (
    Mismatch,
    close_mask,
    compare_tensor,
    flush_subnormals,
    same_values,
    tolerance,
    unravel,
)
from conformance.engine.truth import float64_value

#: the dtypes a device may declare it computes in themselves
HALF = (torch.float16, torch.bfloat16)
#: roundings in the dtype a result computed in it may carry, at the scale of its operands
ROUNDINGS = 4


@dataclass(frozen=True)
class DtypePolicy:
    """The manifest's declarations for one case's dtype."""

    flushes_subnormals: bool = False
    computes_in_dtype: bool = False

    def in_dtype(self, dtype: torch.dtype) -> bool:
        """Whether values of `dtype` are judged as computed in the dtype itself."""
        return self.computes_in_dtype and dtype in HALF

    def excuses(self, s: Any, dtype: torch.dtype) -> bool:
        """Whether the declaration may excuse sample `s`'s values of `dtype`: the dtype is
        declared and the op computes something. An op whose result IEEE defines exactly and
        CPU gives bit for bit (copies, selections, concatenation, views, neg, max) rounds
        nothing in any precision: the declaration never excuses its last bit."""
        return self.in_dtype(dtype) and not computes_nothing(s)


def computes_nothing(s: Any) -> bool:
    """Sample `s`'s op moves, selects or negates values: ieee.EXACT, and measured exact on CPU
    (engine/exactness.py tells apart the non-pointwise ops that compute)."""
    exact = s.exactness is not None and s.exactness.exact
    return exact and ieee.kind(s.overload) == ieee.EXACT


def compare_result(
    s: Any,
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    device_type: str,
    check_strides: bool,
    check_values: bool,
) -> None:
    """`compare.compare_tensor` of one device tensor (an output, a written argument) of sample
    `s` (a checks.Sample) under the case's policy: CPU's values flushed where the device
    flushes subnormals; values beyond the tolerance judged again against the float64 truth
    where the device computes in the dtype."""
    policy: DtypePolicy = s.policy
    if policy.flushes_subnormals:
        expected = flush_subnormals(expected, s.host(actual))
    try:
        compare_tensor(
            name,
            actual,
            expected,
            device_type=device_type,
            check_strides=check_strides,
            check_values=check_values and not s.known_identical(actual, expected),
            tol_scale=s.spec.tol_scale,
            stats=s.stats,
            read=s.host,
        )
    except Mismatch as m:
        if m.check != "values":
            raise
        got = s.host(actual)
        if _as_accurate_as_cpu(s, name, got, expected):
            return
        if not policy.excuses(s, expected.dtype):
            raise
        _judge_in_dtype(s, name, got, expected)
    if check_values and expected.is_floating_point() and policy.excuses(s, expected.dtype):
        why = biased_rounding(s, name, s.host(actual), expected)  # values pass element-wise
        if why is not None:
            raise Mismatch("rounding", why)


def _as_accurate_as_cpu(s: Any, name: str, got: torch.Tensor, cpu: torch.Tensor) -> bool:
    """Values beyond the tolerance against CPU's where, on each such element, the device is at
    least as close to the float64 truth as CPU: CPU rounds a float64 scalar to float16 before
    `x - s`, a device that keeps it in float32 is the more accurate one (an H200's
    `_foreach_sub.Scalar` in float16 near zero: 9 % from CPU, on the correctly rounded value).
    Not where CPU disagrees with itself across layouts (the truth runs on the placed layout,
    CPU's bug included), nor for float64 (no wider truth). A pass says so in a note."""
    if s.torch_bug is not None or not cpu.is_floating_point() or cpu.dtype == torch.float64:
        return False
    truth = float64_value(s, cpu.dtype, name)
    if truth is None or truth.shape != cpu.shape or got.shape != cpu.shape:
        return False
    # the elements the values check failed, by its own rule (issue 79: judged here by the
    # op's scaled tolerance, a -sizes sample held to CPU's own error had "0 element(s) beyond",
    # and a batch norm's saved mean of 0 for 0.219 passed)
    beyond = ~close_mask(got, cpu, s.spec.tol_scale, name)[0]
    if not bool(beyond.any()):
        return False
    t, d, c = (x.detach().to(torch.float64) for x in (truth, got, cpu))
    # a non-finite value on either side is as close only when it is the same value: every
    # infinity is infinitely far from a finite truth, -inf as far as +inf (issue 79)
    finite = d.isfinite() & c.isfinite()
    closer = torch.where(finite, (d - t).abs() <= (c - t).abs(), same_values(d, c))
    if not bool((closer | ~beyond).all()):
        return False
    s.notes.append(
        f"{name}: {int(beyond.sum())} element(s) beyond cpu's tolerance, each at least as close "
        "to the float64 result as cpu's (cpu rounds an operand or a step that the device keeps "
        "wider)"
    )
    return True


def _judge_in_dtype(s: Any, name: str, got: torch.Tensor, cpu: torch.Tensor) -> None:
    """Values the device computed in their own half dtype, against the float64 truth with that
    dtype's own accuracy (the module docstring); a pass says so in a note."""
    dtype, short = cpu.dtype, str(cpu.dtype).removeprefix("torch.")
    truth = float64_value(s, dtype, name)
    basis = "the float64 result"
    if truth is None or truth.shape != cpu.shape:
        truth, basis = cpu, "cpu's result"
    want, have = truth.to(torch.float64), got.to(torch.float64)
    rtol, atol = tolerance(dtype, s.spec.tol_scale)
    scale = _scale(s, want, _position(s, name, cpu))
    slack = ROUNDINGS * torch.finfo(dtype).eps * scale
    ok = ((have - want).abs() <= atol + rtol * want.abs() + slack) | (have == want)
    ok |= have.isnan() & want.isnan()
    if bool(ok.all()):
        s.notes.append(
            f"values computed in {short} (manifest computes_in_dtype): beyond cpu's {short} "
            f"tolerance, within {ROUNDINGS} roundings in {short} of {basis}"
        )
        return
    bad = (~ok).reshape(-1)
    first = int(bad.nonzero()[0, 0])
    at = unravel(first, tuple(cpu.shape))
    raise Mismatch(
        "values",
        f"{name}: {int(bad.sum())}/{bad.numel()} elements differ from {basis} by more than "
        f"{short}'s own accuracy (rtol {rtol:g}, atol {atol:g}, plus {ROUNDINGS} roundings in "
        f"{short} at {_where(s)} scale: {slack.reshape(-1)[first].item():.3g} there), though "
        f"the manifest says the device computes in {short}; first at {at}: device "
        f"{have.reshape(-1)[first].item()!r} vs {want.reshape(-1)[first].item()!r} "
        f"(cpu {cpu.reshape(-1)[first].item()!r})",
    )


#: elements a distribution needs before it says anything of a rounding mode
DISTRIBUTION_MIN = 16


def biased_rounding(s: Any, name: str, got: torch.Tensor, cpu: torch.Tensor) -> str | None:
    """Why the values of a pointwise op declared computed in its half dtype cannot come from
    round-to-nearest, or None. Per element, a few roundings in the dtype excuse a few ulps; over
    a sample they leave a trace: a kernel that rounds to nearest gives the correctly rounded
    result on some elements, and errs both ways. Never correctly rounded on 16 or more
    elements, or every error toward zero (truncation) or away from it, is not that (issue 79:
    an addcmul with the lowest bit of every result flipped, or its last two bits dropped,
    passed every case declared)."""
    own = ieee.pointwise(s.overload) or ieee.per_tensor_pointwise(s.overload)
    if not own or got.shape != cpu.shape:
        return None
    truth = float64_value(s, cpu.dtype, name)
    if truth is None or truth.shape != cpu.shape:
        return None
    rounded = truth.to(cpu.dtype)
    judged = got.isfinite() & rounded.isfinite() & (rounded != 0)
    if int(judged.sum()) < DISTRIBUTION_MIN:
        return None
    d, r, t = got[judged], rounded[judged], truth[judged]
    right = (d == r).sum()
    off = d != r
    short = str(cpu.dtype).removeprefix("torch.")
    if int(right) == 0:
        return (
            f"{name}: none of {d.numel()} elements is the correctly rounded {short} result: a "
            f"kernel computing in {short} with round-to-nearest gives it on some (manifest "
            "computes_in_dtype excuses a few roundings, not another rounding mode)"
        )
    if int(off.sum()) < DISTRIBUTION_MIN:
        return None
    toward = (d.to(torch.float64).abs() < t.abs())[off]
    if bool(toward.all()) or not bool(toward.any()):
        way = "toward zero" if bool(toward.all()) else "away from zero"
        return (
            f"{name}: all {int(off.sum())} elements that are not the correctly rounded {short} "
            f"result are off {way}: truncation, not round-to-nearest (manifest "
            "computes_in_dtype excuses a few roundings, not another rounding mode)"
        )
    return None


def _where(s: Any) -> str:
    own = ieee.pointwise(s.overload) or ieee.per_tensor_pointwise(s.overload)
    return "the element's own operands'" if own else "the operands'"


def _position(s: Any, name: str, cpu: torch.Tensor) -> int | None:
    """Which tensor of its list `cpu` is (a foreach op's i-th output, or its i-th written
    tensor of argument `name`), or None."""
    if not ieee.per_tensor_pointwise(s.overload):
        return None
    if name.startswith("output "):
        return int(name.split()[1])
    arg = name.partition("[")[0]
    views = [view for written, view in s.cpu.written() if written.partition("[")[0] == arg]
    return next((i for i, view in enumerate(views) if view is cpu), None)


def _operands(s: Any, position: int | None) -> list[torch.Tensor]:
    """The floating operands before the call (in-place forms): all of them, or, for the tensor
    at `position` of a foreach op's lists, the tensor at that position of each list and every
    tensor argument outside a list (issue 79: a bfloat16 `_foreach_add.List` flipping the sign
    of every small result passed, scaled by the largest value of all the lists' tensors)."""
    fresh = s.placed.materialize("cpu")
    if position is None:
        found = [view for _, _, view in fresh.bases]
    else:
        found = []
        for value in (*fresh.args, *fresh.kwargs.values()):
            if isinstance(value, list | tuple) and position < len(value):
                found.append(value[position])
            elif isinstance(value, torch.Tensor):
                found.append(value)
    return [
        x.detach().to(torch.float64)
        for x in found
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not x.is_complex()
    ]


def _scale(s: Any, want: torch.Tensor, position: int | None = None) -> torch.Tensor:
    """Per element, the magnitude the computation of that element rounds at: for a pointwise
    op, the largest |value| among the element's own result and its own operands (each floating
    argument broadcast to the result, as the op reads it: addcmul's a + v t1 t2 near 0 from
    operands near 1 keeps their scale, a result small because its operands are is held to its
    own); for any other op (a reduction, a product), the largest |value| among all floating
    operands and the result, as an element's operands are not known."""
    operands = _operands(s, position)
    finite = want.abs().nan_to_num(nan=0.0, posinf=0.0)
    if not ieee.pointwise(s.overload) and position is None:
        return torch.full_like(finite, _magnitude([want, *operands]))
    scale = finite
    for x in operands:
        try:
            own = torch.broadcast_to(x.abs().nan_to_num(nan=0.0, posinf=0.0), want.shape)
        except RuntimeError:  # an operand the result does not map to element by element
            own = torch.full_like(finite, _magnitude([x]))
        scale = torch.maximum(scale, own)
    return scale


def _magnitude(tensors: list[torch.Tensor]) -> float:
    """The largest finite |value| among `tensors`: the scale a computation's roundings work at."""
    found = 0.0
    for t in tensors:
        finite = t[torch.isfinite(t)] if t.numel() else t
        if finite.numel():
            found = max(found, float(finite.abs().max()))
    return found
