"""Gradients against CPU: the `-grad` cases (training).

Per sample, on CPU and on the device from the same values: the floating inputs become leaves
that require grad (in the case's layout), the op runs forward with autograd recording (through
whatever autograd kernel the device has: torch's formula, or one the backend registered for
AutogradPrivateUse1), then `torch.autograd.grad` runs with the same grad_outputs placed in every
layout backward kernels meet (contiguous; transposed, as after a transpose/permute; stride 0, as
the grad_output of sum/mean/expand; a storage offset), and every input gradient is compared.
Finally `backward()` runs twice into the leaves' `.grad`: accumulated values, and the layout
PyTorch's gradient layout contract gives `.grad` on CPU.

A sample whose CPU forward raises, or whose outputs do not require grad on CPU, says nothing
about gradients (not applicable); a derivative CPU does not implement likewise.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import errorclass, layouts
from conformance.engine.checks import NotApplicable, Unsupported
from conformance.engine.compare import (
    TOLERANCES,
    ErrorStats,
    Mismatch,
    Scale,
    compare_tensor,
    tolerance,
)
from conformance.engine.placing import Materialized, PlacedCall
from conformance.engine.transfer import has_storage

#: the check names a -grad case can fail with (docs/RESULTS.md describes each)
GRAD_CHECKS = {
    "grad": "gradients match CPU: every input's gradient for grad_outputs in every layout, the "
    "forward with requires_grad, .grad after backward() twice",
    "grad-layout": ".grad of a leaf has the strides PyTorch's gradient layout contract gives it "
    "on CPU",
}
#: where the grad_outputs of each sample are placed (engine/layouts.py names)
GRAD_OUTPUT_LAYOUTS = ("contiguous", "transposed", "expanded", "offset")
#: layouts of the leaves (the case's layout axis for -grad cases)
GRAD_CASE_LAYOUTS = ("contiguous", "transposed")
#: floating dtypes gradients are defined for
GRAD_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
#: dtypes of the overloads that have only -grad cases (decompositions the models call): in
#: float16/bfloat16 a decomposition rounds every intermediate to the dtype where CPU's fused
#: kernel computes in float32 and rounds once, so results that cancel differ by many ulps with
#: no bug (rsub.Scalar bfloat16: 0.125 apart at |x| 0.19); the ops it reaches are tested in
#: those dtypes as cases of their own
DECOMPOSITION_GRAD_DTYPES = (torch.float32, torch.float64)
MAX_GRAD_SAMPLES = 8  # samples per case: each costs two forwards and six backwards per side
GRAD_SEED = 1234
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


def _differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def leaves_of(m: Materialized) -> tuple[tuple, dict, list[tuple[str, torch.Tensor]]]:
    """(args, kwargs, [(argument name, leaf)]): every floating tensor the op only reads becomes
    a leaf that requires grad, with the strides and storage offset of its placement."""
    swap: dict[int, torch.Tensor] = {}
    named = []
    for leaf, _, view in m.bases:
        if leaf.written or leaf.on_cpu or not view.is_floating_point():
            continue
        x = view.detach().requires_grad_(True)
        swap[id(view)] = x
        named.append((leaf.arg, x))
    args, kwargs = tree_map(
        lambda v: swap.get(id(v), v) if isinstance(v, torch.Tensor) else v, (m.args, m.kwargs)
    )
    return tuple(args), dict(kwargs), named


def _call(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, BaseException | None]:
    try:
        with warnings.catch_warnings(), torch.enable_grad():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs), None
    except Exception as exc:  # compared, not raised
        return None, exc.with_traceback(None)


def _outputs(result: Any) -> list[tuple[int, torch.Tensor]]:
    """(flat index, tensor) of the results that require grad."""
    flat, _ = tree_flatten(result)
    return [(i, t) for i, t in enumerate(flat) if _differentiable(t) and t.requires_grad]


def grad_output(like: torch.Tensor, index: int) -> torch.Tensor:
    """The grad_output for one output: deterministic values of its shape and dtype, on CPU."""
    gen = torch.Generator().manual_seed(GRAD_SEED + index)
    values = torch.rand(like.shape, generator=gen, dtype=torch.float64) * 2 - 1
    return values.to(like.dtype)


def placed_grad_outputs(
    outputs: list[tuple[int, torch.Tensor]], layout: str, device: torch.device | str
) -> list[torch.Tensor] | None:
    """The grad_outputs placed in `layout` on `device` (None when the layout applies to none)."""
    out, changed = [], False
    for i, t in outputs:
        placement = layouts.LAYOUTS[layout](grad_output(t, i))
        changed = changed or placement is not None
        if placement is None:
            placement = layouts.contiguous(grad_output(t, i))
        out.append(placement.materialize(device)[1])
    return out if changed or layout == "contiguous" else None


def _grads(
    outputs: list[torch.Tensor], inputs: list[torch.Tensor], grads: list[torch.Tensor]
) -> tuple[tuple[torch.Tensor | None, ...] | None, BaseException | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = torch.autograd.grad(
                outputs, inputs, grads, retain_graph=True, allow_unused=True
            )
        return found, None
    except Exception as exc:
        return None, exc.with_traceback(None)


def _backward(outputs: list[torch.Tensor], grads: list[torch.Tensor]) -> BaseException | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.autograd.backward(outputs, grads, retain_graph=True)
        return None
    except Exception as exc:
        return exc.with_traceback(None)


def _raised(what: str, cpu_exc: BaseException | None, dev_exc: BaseException | None) -> None:
    """Error parity of one step (forward, grad, backward); raises when the sample is not
    applicable, unsupported or a mismatch."""
    if cpu_exc is not None:
        cls = errorclass.classify(cpu_exc)
        raise NotApplicable(f"cpu raised in {what} ({cls.describe()}): nothing to compare")
    if dev_exc is not None:
        got = errorclass.classify(dev_exc)
        if got.kind == errorclass.NOT_IMPLEMENTED:
            raise Unsupported(f"device raised {got.describe()} in {what}; cpu computes")
        raise Mismatch("grad", f"device raised {got.describe()} in {what}; cpu computes")


def run_grad_sample(
    op: Any,
    placed: PlacedCall,
    device: torch.device | str,
    scale: Scale,
    stats: ErrorStats,
    on_device: Callable[[], AbstractContextManager] = nullcontext,
    reference: Any = None,
) -> None:
    """Compare the gradients of one sample: `op` on the device, `reference` (default `op`) on
    CPU. Every device step runs inside `on_device()` (the routing of the case's path). Raises
    Mismatch, Unsupported or NotApplicable."""
    cpu_args, cpu_kwargs, cpu_leaves = leaves_of(placed.materialize("cpu"))
    if not cpu_leaves:
        raise NotApplicable("no floating input to differentiate")
    expected, exc = _call(reference or op, cpu_args, cpu_kwargs)
    if exc is not None:
        _raised("the forward", exc, None)
    cpu_outs = _outputs(expected)
    if not cpu_outs:
        raise NotApplicable("no output requires grad on cpu (not differentiable)")
    truth = _truth(reference or op, cpu_args, cpu_kwargs, cpu_leaves, cpu_outs)
    dev_args, dev_kwargs, dev_leaves = leaves_of(placed.materialize(device))
    with on_device():
        actual, exc = _call(op, dev_args, dev_kwargs)
    _raised("the forward with requires_grad", None, exc)
    flat_actual, _ = tree_flatten(actual)
    flat_expected, _ = tree_flatten(expected)
    if len(flat_actual) != len(flat_expected):
        raise Mismatch(
            "grad",
            f"forward with requires_grad returned {len(flat_actual)} values, "
            f"cpu {len(flat_expected)}",
        )
    dev_outs = []
    for i, e in cpu_outs:
        a = flat_actual[i]
        if not isinstance(a, torch.Tensor) or not a.requires_grad:
            raise Mismatch(
                "grad",
                f"output {i} does not require grad on the device (no autograd graph: the "
                "device's autograd kernel dropped it); on cpu it does",
            )
        _compare("grad", f"output {i} of the forward with requires_grad", a, e, scale, stats, 1.0)
        dev_outs.append(a)
    for layout in GRAD_OUTPUT_LAYOUTS:
        cpu_g = placed_grad_outputs(cpu_outs, layout, "cpu")
        if cpu_g is None:
            continue
        try:
            _compare_grads(
                cpu_outs, cpu_leaves, dev_outs, dev_leaves, cpu_g, layout, device, scale, stats,
                on_device, truth,
            )  # fmt: skip
        except Mismatch as m:
            m.layout = layout  # type: ignore[attr-defined]  # where blame looks for evidence
            raise
    _accumulated(cpu_outs, cpu_leaves, dev_outs, dev_leaves, device, scale, stats, on_device, truth)


def _compare_grads(
    cpu_outs, cpu_leaves, dev_outs, dev_leaves, cpu_g, layout, device, scale, stats, on_device,
    truth,
) -> None:  # fmt: skip
    """Every input's gradient for the grad_outputs placed in `layout`, against CPU's."""
    names = [n for n, _ in cpu_leaves]
    dev_g = placed_grad_outputs(cpu_outs, layout, device)
    want, exc = _grads([e for _, e in cpu_outs], [x for _, x in cpu_leaves], cpu_g)
    if exc is not None:
        _raised("backward", exc, None)
    with on_device():
        got, exc = _grads(dev_outs, [x for _, x in dev_leaves], dev_g)
    _raised(f"backward (grad_output {layout})", None, exc)
    assert want is not None and got is not None
    own = truth.own_errors() if truth is not None else None
    for i, (name, a, e) in enumerate(zip(names, got, want, strict=True)):
        what = f"grad of {name} (grad_output {layout})"
        if (a is None) != (e is None):
            raise Mismatch(
                "grad",
                f"{what}: {'none' if a is None else 'a tensor'} on the device, "
                f"{'none' if e is None else 'a tensor'} on cpu",
            )
        if a is not None:
            _compare_gradient(what, a, e, own[i] if own else None, scale, stats)


def _accumulated(
    cpu_outs, cpu_leaves, dev_outs, dev_leaves, device, scale, stats, on_device, truth
) -> None:
    """backward() twice into the leaves: `.grad` accumulates, with CPU's layout."""
    cpu_g = placed_grad_outputs(cpu_outs, "contiguous", "cpu")
    own = truth.own_errors() if truth is not None else None
    for _ in range(2):
        exc = _backward([e for _, e in cpu_outs], cpu_g)
        if exc is not None:
            _raised("backward into .grad", exc, None)
    dev_g = placed_grad_outputs(cpu_outs, "contiguous", device)
    for _ in range(2):
        with on_device():
            exc = _backward(dev_outs, dev_g)
        _raised("backward into .grad", None, exc)
    for i, ((name, e), (_, a)) in enumerate(zip(cpu_leaves, dev_leaves, strict=True)):
        what = f"{name}.grad after backward() twice"
        if (a.grad is None) != (e.grad is None):
            raise Mismatch("grad", f"{what}: device {a.grad is not None}, cpu {e.grad is not None}")
        if e.grad is None:
            continue
        _compare_gradient(what, a.grad, e.grad, 2 * own[i] if own else None, scale, stats)
        if a.grad.stride() != e.grad.stride() and e.grad.numel() > 1 and has_storage(a.grad):
            raise Mismatch(
                "grad-layout",
                f"{what}: strides {a.grad.stride()}, cpu {e.grad.stride()} (the gradient layout "
                f"contract: .grad of a leaf with strides {e.stride()})",
            )


class Truth:
    """CPU's forward again in float64 from the same values: the gradients it gives are the
    truth that CPU's own error in float16/bfloat16 is measured against."""

    def __init__(
        self, outputs: list[torch.Tensor], leaves: list[torch.Tensor], cpu_outs: list, cpu_leaves
    ) -> None:
        self.outputs = outputs
        self.leaves = leaves
        self.cpu_outs = cpu_outs
        self.cpu_leaves = cpu_leaves
        self._own: list[float] | None = None

    def grads(self, grad_outputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
        """The float64 gradients of the leaves for these grad_outputs (None: not computed)."""
        found, exc = _grads(
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
            for layout in GRAD_OUTPUT_LAYOUTS:
                cpu_g = placed_grad_outputs(self.cpu_outs, layout, "cpu")
                exact = self.grads(cpu_g) if cpu_g is not None else None
                if cpu_g is None or exact is None:
                    continue
                for g in (cpu_g, [t.contiguous() for t in cpu_g]):  # a device may copy it
                    want, exc = _grads(
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


def _truth(fn: Any, args: tuple, kwargs: dict, leaves: list, outs: list) -> Truth | None:
    """The float64 run of a float16/bfloat16 sample (None for other dtypes, or where it fails)."""
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
    result, exc = _call(fn, tuple(args64), dict(kwargs64))
    if exc is not None:
        return None
    flat, _ = tree_flatten(result)
    found = [flat[i] if i < len(flat) else None for i, _ in outs]
    if not all(_differentiable(t) and t.requires_grad for t in found):
        return None
    return Truth(found, [swap[id(x)] for _, x in leaves], outs, leaves)


def _compare_gradient(
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
        _compare("grad", what, actual, expected, scale, stats, GRAD_TOLERANCE)
        return
    from conformance.engine.transfer import read_back

    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        _compare("grad", what, actual, expected, scale, stats, 1.0)  # says what differs
        return
    settled = _settled(what, actual)
    got = (settled if settled is not None else read_back(actual.detach())).to(torch.float64)
    want = expected.detach().to(torch.float64)
    rtol, atol = tolerance(expected.dtype)  # the base: CPU's measured error replaces the op's
    allowed = atol + rtol * want.abs() + OWN_ERROR * own
    diff = (got - want).abs()
    ok = (diff <= allowed) | (got == want) | (got.isnan() & want.isnan())
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
        _raised(f"{what}, when its graph ran", None, exc.with_traceback(None))
        raise  # not reached: _raised always raises for a device error


def _compare(
    check: str,
    what: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    scale: Scale,
    stats: ErrorStats,
    widen: float,
) -> None:
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


def differentiable_on_cpu(op: Any, placed: list[PlacedCall], tries: int = 4) -> bool:
    """Whether any of the first `tries` samples has an output that requires grad on CPU."""
    for p in placed[:tries]:
        args, kwargs, leaves = leaves_of(p.materialize("cpu"))
        if not leaves:
            continue
        result, exc = _call(op, args, kwargs)
        if exc is None and _outputs(result):
            return True
    return False
