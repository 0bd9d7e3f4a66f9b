"""The autograd steps of a -grad sample (engine/gradients.py), each error captured rather than
raised: the leaves that require grad, the forward with grad enabled, `torch.autograd.grad`,
`backward()`; the grad_outputs, placed in a layout backward kernels meet; and a step's error
parity (not applicable, unsupported, or a `grad` mismatch)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import errorclass, layouts
from conformance.engine.checks import NotApplicable, Unsupported
from conformance.engine.compare import Mismatch
from conformance.engine.placing import Materialized

GRAD_SEED = 1234


def differentiable(t: Any) -> bool:
    """A floating tensor: one that gradients are defined for."""
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


def call_with_grad(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, BaseException | None]:
    """`fn(*args, **kwargs)` with grad enabled: (result, None), or (None, what it raised)."""
    try:
        with warnings.catch_warnings(), torch.enable_grad():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs), None
    except Exception as exc:  # compared, not raised
        return None, exc.with_traceback(None)


def requiring_grad(result: Any) -> list[tuple[int, torch.Tensor]]:
    """(flat index, tensor) of the results that require grad."""
    flat, _ = tree_flatten(result)
    return [(i, t) for i, t in enumerate(flat) if differentiable(t) and t.requires_grad]


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


def run_engine(
    outputs: list[torch.Tensor],
    grads: list[torch.Tensor],
    inputs: tuple[torch.Tensor, ...],
    accumulate: bool,
) -> tuple[torch.Tensor | None, ...]:
    """The autograd engine call that `torch.autograd.grad` (`accumulate` False) and
    `torch.autograd.backward` (True) end in, graph retained, an unused input's gradient None.
    Their Python preamble (`_make_grads`) only checks each grad_output's shape and dtype against
    its output, which the harness built them from; on torch 2.13 it imports sympy (about 1 s of
    a -k run) to compare the sizes. The engine checks them again (`validate_outputs`)."""
    engine = getattr(torch.autograd.graph, "_engine_run_backward", None)
    if engine is None:  # torch before 2.3
        engine = torch.autograd.Variable._execution_engine.run_backward
    return engine(
        tuple(outputs),
        tuple(grads),
        True,  # retain_graph
        False,  # create_graph
        inputs,
        True,  # allow_unused (allow_unreachable)
        accumulate_grad=accumulate,
    )


def autograd_grad(
    outputs: list[torch.Tensor], inputs: list[torch.Tensor], grads: list[torch.Tensor]
) -> tuple[tuple[torch.Tensor | None, ...] | None, BaseException | None]:
    """`torch.autograd.grad` (graph retained, an unused input's gradient None): (gradients,
    None), or (None, what it raised)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return run_engine(outputs, grads, tuple(inputs), accumulate=False), None
    except Exception as exc:
        return None, exc.with_traceback(None)


def autograd_backward(
    outputs: list[torch.Tensor], grads: list[torch.Tensor]
) -> BaseException | None:
    """`backward()` into the leaves' `.grad` (graph retained): None, or what it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_engine(outputs, grads, (), accumulate=True)
        return None
    except Exception as exc:
        return exc.with_traceback(None)


def raise_step_error(
    what: str, cpu_exc: BaseException | None, dev_exc: BaseException | None
) -> None:
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
