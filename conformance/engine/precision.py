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
    compare_tensor,
    flush_subnormals,
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
            check_values=check_values,
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
    rtol, atol = tolerance(cpu.dtype, s.spec.tol_scale)
    beyond = ~torch.isclose(got, cpu, rtol=rtol, atol=atol, equal_nan=True)
    t, d, c = (x.detach().to(torch.float64) for x in (truth, got, cpu))
    closer = ((d - t).abs() <= (c - t).abs()) & (d.isfinite() == c.isfinite())
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
    scale = _scale(s, want)
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


def _where(s: Any) -> str:
    return "the element's own operands'" if ieee.pointwise(s.overload) else "the operands'"


def _scale(s: Any, want: torch.Tensor) -> torch.Tensor:
    """Per element, the magnitude the computation of that element rounds at: for a pointwise
    op, the largest |value| among the element's own result and its own operands (each floating
    argument broadcast to the result, as the op reads it: addcmul's a + v t1 t2 near 0 from
    operands near 1 keeps their scale, a result small because its operands are is held to its
    own); for any other op (a reduction, a product), the largest |value| among all floating
    operands and the result, as an element's operands are not known."""
    fresh = s.placed.materialize("cpu")  # the operands before the call (in-place forms)
    operands = [
        view.detach().to(torch.float64)
        for _, _, view in fresh.bases
        if view.is_floating_point() and not view.is_complex()
    ]
    finite = want.abs().nan_to_num(nan=0.0, posinf=0.0)
    if not ieee.pointwise(s.overload):
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
