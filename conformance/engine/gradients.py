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
about gradients (not applicable); a derivative CPU does not implement likewise. The autograd
steps: `grad_steps.py`; how a gradient is judged against CPU's: `grad_compare.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import grad_compare
from conformance.engine.checks import NotApplicable
from conformance.engine.compare import ErrorStats, Mismatch, Scale
from conformance.engine.grad_compare import compare_gradient, compare_widened
from conformance.engine.grad_steps import (
    autograd_backward,
    autograd_grad,
    call_with_grad,
    leaves_of,
    placed_grad_outputs,
    raise_step_error,
    requiring_grad,
)
from conformance.engine.placing import PlacedCall
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
    expected, exc = call_with_grad(reference or op, cpu_args, cpu_kwargs)
    if exc is not None:
        raise_step_error("the forward", exc, None)
    cpu_outs = requiring_grad(expected)
    if not cpu_outs:
        raise NotApplicable("no output requires grad on cpu (not differentiable)")
    truth = grad_compare.float64_truth(  # by its module: tests/meta/ablation.py patches it there
        reference or op, cpu_args, cpu_kwargs, cpu_leaves, cpu_outs, GRAD_OUTPUT_LAYOUTS
    )
    dev_args, dev_kwargs, dev_leaves = leaves_of(placed.materialize(device))
    with on_device():
        actual, exc = call_with_grad(op, dev_args, dev_kwargs)
    raise_step_error("the forward with requires_grad", None, exc)
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
        compare_widened(
            "grad", f"output {i} of the forward with requires_grad", a, e, scale, stats, 1.0
        )
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
    want, exc = autograd_grad([e for _, e in cpu_outs], [x for _, x in cpu_leaves], cpu_g)
    if exc is not None:
        raise_step_error("backward", exc, None)
    with on_device():
        got, exc = autograd_grad(dev_outs, [x for _, x in dev_leaves], dev_g)
    raise_step_error(f"backward (grad_output {layout})", None, exc)
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
            compare_gradient(what, a, e, own[i] if own else None, scale, stats)


def _accumulated(
    cpu_outs, cpu_leaves, dev_outs, dev_leaves, device, scale, stats, on_device, truth
) -> None:
    """backward() twice into the leaves: `.grad` accumulates, with CPU's layout."""
    cpu_g = placed_grad_outputs(cpu_outs, "contiguous", "cpu")
    own = truth.own_errors() if truth is not None else None
    for _ in range(2):
        exc = autograd_backward([e for _, e in cpu_outs], cpu_g)
        if exc is not None:
            raise_step_error("backward into .grad", exc, None)
    dev_g = placed_grad_outputs(cpu_outs, "contiguous", device)
    for _ in range(2):
        with on_device():
            exc = autograd_backward(dev_outs, dev_g)
        raise_step_error("backward into .grad", None, exc)
    for i, ((name, e), (_, a)) in enumerate(zip(cpu_leaves, dev_leaves, strict=True)):
        what = f"{name}.grad after backward() twice"
        if (a.grad is None) != (e.grad is None):
            raise Mismatch("grad", f"{what}: device {a.grad is not None}, cpu {e.grad is not None}")
        if e.grad is None:
            continue
        compare_gradient(what, a.grad, e.grad, 2 * own[i] if own else None, scale, stats)
        if a.grad.stride() != e.grad.stride() and e.grad.numel() > 1 and has_storage(a.grad):
            raise Mismatch(
                "grad-layout",
                f"{what}: strides {a.grad.stride()}, cpu {e.grad.stride()} (the gradient layout "
                f"contract: .grad of a leaf with strides {e.stride()})",
            )


def differentiable_on_cpu(op: Any, placed: list[PlacedCall], tries: int = 4) -> bool:
    """Whether any of the first `tries` samples has an output that requires grad on CPU."""
    for p in placed[:tries]:
        args, kwargs, leaves = leaves_of(p.materialize("cpu"))
        if not leaves:
            continue
        result, exc = call_with_grad(op, args, kwargs)
        if exc is None and requiring_grad(result):
            return True
    return False
