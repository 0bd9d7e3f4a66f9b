"""A gradient against CPU's (engine/gradients.py): float32/float64 within `GRAD_TOLERANCE`
times the op's tolerance; float16/bfloat16 within the dtype's base tolerance plus an allowance
measured per sample, `OWN_ERROR` times CPU's own distance from a float64 run of the same values
(`Truth`). On a device without storage a gradient's pending graph runs first, its error the
device's."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.compare import (
    TOLERANCES,
    ErrorStats,
    Mismatch,
    Scale,
    compare_tensor,
    same_values,
    tolerance,
)
from conformance.engine.grad_steps import (
    autograd_grad,
    call_with_grad,
    differentiable,
    placed_grad_outputs,
    raise_step_error,
)

# A gradient is the product of several kernels (the op's backward formula, often several ops),
# each rounding once. float32/float64: compared with 4x the op's per-dtype tolerance (measured
# on torch 2.13 with CPU against CPU on another layout, python -m conformance.measure.tolerances:
# backward formulas of reductions and matmuls drift up to ~2x the forward figure in float32;
# that still catches a gradient 0.1 % off, python -m conformance.measure.power).
GRAD_TOLERANCE = 4.0
# float16/bfloat16: the error of a gradient is measured per sample, not assumed. CPU's gradient
# is computed again in float64 from the same values (the truth); the device may differ from
# CPU's gradient by the dtype's base tolerance plus `OWN_ERROR` times CPU's largest distance
# from the truth for that input, over every grad_output layout (`Truth.own_errors`: a kernel as
# accurate as CPU's, erring the other way). Where backward terms cancel (softmax's
# y * (g - sum(g * y)), batch norm's mean of the gradient) the allowance is as wide as CPU's own
# error, elsewhere nearly as tight as the dtype; per input rather than per element, since a
# kernel as accurate as CPU errs where CPU happens to be exact. The op's forward multiplier is
# not used: 4x it with atol raised to rtol let a bfloat16 gelu gradient 5-7 % off pass, batch
# norm's (2, 2000) one 20 % off (issue 32). Measured with CPU on every other layout as the
# device (the -grad cases of --fallback-ops all, torch 2.13: 1,252 float16/bfloat16 samples):
# no false alarm; python -m conformance.measure.power gives what it catches.
REDUCED = (torch.float16, torch.bfloat16)
OWN_ERROR = 2.0


class Truth:
    """CPU's forward again in float64 from the same values: the gradients it gives are the
    truth that CPU's own error in float16/bfloat16 is measured against."""

    def __init__(
        self,
        outputs: list[torch.Tensor],
        leaves: list[torch.Tensor],
        cpu_outs: list,
        cpu_leaves,
        layouts: tuple[str, ...],
    ) -> None:
        self.outputs = outputs
        self.leaves = leaves
        self.cpu_outs = cpu_outs
        self.cpu_leaves = cpu_leaves
        self.layouts = layouts  # the grad_output layouts of the case
        self._own: list[float] | None = None

    def grads(self, grad_outputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
        """The float64 gradients of the leaves for these grad_outputs (None: not computed)."""
        found, exc = autograd_grad(
            self.outputs, self.leaves, [g.detach().to(torch.float64) for g in grad_outputs]
        )
        return list(found) if exc is None and found is not None else None

    def own_errors(self) -> list[float]:
        """Per leaf, CPU's largest distance from the truth over the gradients of every
        grad_output layout, as placed and as a contiguous copy: one CPU computation's error is
        a sample of one (batch norm's weight gradient for a constant grad_output, 0 exactly,
        lands 1.8e-5 from it in float16 with the grad_output expanded, 3.1e-4 contiguous)."""
        if self._own is None:
            own = [0.0] * len(self.cpu_leaves)
            for layout in self.layouts:
                cpu_g = placed_grad_outputs(self.cpu_outs, layout, "cpu")
                exact = self.grads(cpu_g) if cpu_g is not None else None
                if cpu_g is None or exact is None:
                    continue
                for g in (cpu_g, [t.contiguous() for t in cpu_g]):  # a device may copy it
                    want, exc = autograd_grad(
                        [e for _, e in self.cpu_outs], [x for _, x in self.cpu_leaves], g
                    )
                    if exc is not None or want is None:
                        continue
                    for i, (w, x) in enumerate(zip(want, exact, strict=True)):
                        if w is not None and x is not None:
                            own[i] = max(own[i], _distance(w, x))
            self._own = own
        return self._own


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| over the elements where both are finite."""
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    both = torch.isfinite(a64) & torch.isfinite(b64)
    return float((a64 - b64).abs()[both].max()) if bool(both.any()) else 0.0


def float64_truth(
    fn: Any, args: tuple, kwargs: dict, leaves: list, outs: list, layouts: tuple[str, ...]
) -> Truth | None:
    """The float64 run of a float16/bfloat16 sample (None for other dtypes, or where it fails);
    `layouts`: the grad_output layouts CPU's own error is measured over."""
    if not any(x.dtype in REDUCED for _, x in leaves):
        return None
    swap = {id(x): x.detach().to(torch.float64).requires_grad_(True) for _, x in leaves}

    def upcast(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if id(v) in swap:
                return swap[id(v)]
            if v.is_floating_point():
                return v.detach().to(torch.float64)
        return v

    args64, kwargs64 = tree_map(upcast, (args, kwargs))
    result, exc = call_with_grad(fn, tuple(args64), dict(kwargs64))
    if exc is not None:
        return None
    flat, _ = tree_flatten(result)
    found = [flat[i] if i < len(flat) else None for i, _ in outs]
    if not all(differentiable(t) and t.requires_grad for t in found):
        return None
    return Truth(found, [swap[id(x)] for _, x in leaves], outs, leaves, layouts)


def compare_gradient(
    what: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    own: float | None,
    scale: Scale,
    stats: ErrorStats,
) -> None:
    """A gradient against CPU's: in float16/bfloat16 with the measured allowance (see
    `OWN_ERROR`; `own`: CPU's own error, None where the float64 truth is not known), else with
    `GRAD_TOLERANCE`."""
    if own is None or expected.dtype not in REDUCED:
        compare_widened("grad", what, actual, expected, scale, stats, GRAD_TOLERANCE)
        return
    from conformance.engine.transfer import read_back

    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        compare_widened("grad", what, actual, expected, scale, stats, 1.0)  # says what differs
        return
    settled = _settled(what, actual)
    got = (settled if settled is not None else read_back(actual.detach())).to(torch.float64)
    want = expected.detach().to(torch.float64)
    rtol, atol = tolerance(expected.dtype)  # the base: CPU's measured error replaces the op's
    allowed = atol + rtol * want.abs() + OWN_ERROR * own
    diff = (got - want).abs()
    ok = (diff <= allowed) | same_values(got, want)
    finite = diff[torch.isfinite(diff)]
    worst = float(finite.max()) if finite.numel() else 0.0
    rel = (
        float((finite / want.abs()[torch.isfinite(diff)].clamp_min(1e-30)).max())
        if finite.numel()
        else 0.0
    )
    stats.update(worst, rel)
    if bool(ok.all()):
        return
    bad = (~ok).reshape(-1)
    first = int(bad.nonzero()[0, 0])
    g, w = (float(t.reshape(-1)[first]) for t in (got, want))
    raise Mismatch(
        "grad",
        f"{what}: {int(bad.sum())}/{bad.numel()} elements differ from cpu by more than the "
        f"dtype's tolerance (rtol {rtol:g}, atol {atol:g}) plus {OWN_ERROR:g}x cpu's largest "
        f"error against float64 in this gradient ({own:.3g}); first at flat index {first}: "
        f"device {g!r} vs cpu {w!r}",
        worst,
        rel,
    )


def _settled(what: str, actual: torch.Tensor) -> torch.Tensor | None:
    """On a device without storage (a lazy one), run `actual`'s pending graph first and return
    its values read back: an error there (a backward that fails to lower) is the device's
    finding, not the suite's. None on other devices (nothing pending to run)."""
    from conformance.engine.transfer import has_storage, read_back

    if not actual.numel() or has_storage(actual):
        return None
    try:
        return read_back(actual.detach())
    except Exception as exc:  # noqa: BLE001 - the device's own error when its graph runs
        raise_step_error(f"{what}, when its graph ran", None, exc.with_traceback(None))
        raise  # not reached: raise_step_error always raises for a device error


def compare_widened(
    check: str,
    what: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    scale: Scale,
    stats: ErrorStats,
    widen: float,
) -> None:
    """`actual` against `expected` within the op's tolerance times `widen`, reported as
    `check` (its pending graph run first, on a device without storage)."""
    _settled(what, actual)
    try:
        compare_tensor(
            what,
            actual,
            expected.detach(),
            device_type=actual.device.type,
            check_strides=False,
            check_values=True,
            tol_scale=_widened(scale, widen),
            stats=stats,
        )
    except Mismatch as m:
        raise Mismatch(check, m.message, m.max_abs, m.max_rel) from None


def _widened(scale: Scale, by: float) -> Scale:
    """`scale` with every dtype's tolerance (as `compare.tolerance` derives it) times `by`."""
    if by == 1.0:
        return scale
    out = {}
    for dtype, (rtol, atol) in TOLERANCES.items():
        r, a = tolerance(dtype, scale)
        if dtype in REDUCED:
            a = max(a, r)
        out[dtype] = (r / rtol * by, a / atol * by)
    return out
