"""The checks of what a result is, registered with checks.py's: `identity` (an in-place or out=
overload returns the very tensor it wrote, also called below autograd) and `aliasing` (a view
shares its input's storage, a functional output does not)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from conformance.engine import oracles
from conformance.engine.checks import Sample, returned, sample_check
from conformance.engine.compare import Mismatch, equal_values, same_values
from conformance.engine.errorclass import first_line
from conformance.engine.placing import Materialized
from conformance.engine.schema_facts import returns_written


@sample_check(
    "identity",
    "in-place and out= overloads return the very tensor they wrote: to the caller (on "
    "inference tensors inside torch.inference_mode() ADInplaceOrView does not replace the "
    "kernel's return) and called below autograd (where ADInplaceOrView cannot return self)",
)
def check_identity(s: Sample) -> None:
    if not s.spec.check_aliasing or not returns_written(s.schema):
        return
    inference = any(view.is_inference() for _, _, view in s.dev.bases)
    where = "on inference tensors inside torch.inference_mode()" if inference else "to the caller"
    _returns_written(s, s.actual.result, s.dev, where)
    below = getattr(torch._C, "_AutoDispatchBelowADInplaceOrView", None)
    if below is None:
        return  # torch without the guard: the run header says so
    dev = s.placed.materialize(s.backend.device)
    try:
        with s.backend.routed_through_fallback(s.route), below(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = s.op(*dev.args, **dev.kwargs)
        if s.backend.lazy is not None:
            s.backend.lazy.sync()  # a lazy device raises at its sync point
    except Exception as exc:  # the first call returned (this check runs only then)
        raise Mismatch(
            "error",
            f"called below autograd (as a compiled or functionalized graph calls it) the kernel "
            f"raised {type(exc).__name__}: {first_line(exc)}; the first call returned normally",
        ) from None
    _returns_written(s, result, dev, "called below autograd")
    _wrote_the_same(s, dev)


def _wrote_the_same(s: Sample, again: Materialized) -> None:
    """The second call, below autograd on the same inputs, wrote what the first wrote (issue 79:
    a kernel wrong on its second call in a process passed, this call's values unjudged); a
    random op's second draws, which move on, are draws of the distribution CPU's came from
    (the two-sample oracle, oracles.py, where the call draws `MIN_DRAWS`; where the first
    call's draws are wrong too, the written check names that)."""
    if not s.spec.check_values:
        return
    first = [view for leaf, _, view in s.dev.bases if leaf.written]
    cpu = [view for leaf, _, view in s.cpu.bases if leaf.written]
    second = [(leaf.arg, view) for leaf, _, view in again.bases if leaf.written]
    for a, c, (arg, b) in zip(first, cpu, second, strict=False):
        x, y = s.host(a), s.host(b)
        if x.shape != y.shape or x.dtype != y.dtype:
            continue
        if s.nondeterministic:
            _drew_from_cpus_law(arg, x, y, s.host(c))
            continue
        if not equal_values(x, y):
            differ = int((~same_values(x, y)).sum())
            raise Mismatch(
                "values",
                f"{arg}: called again on the same inputs (below autograd) the kernel wrote "
                f"other values than its first call: {differ} of {x.numel()} elements differ (a "
                "result that depends on the call: a stale cache, a race)",
            )


def _drew_from_cpus_law(
    arg: str, first: torch.Tensor, again: torch.Tensor, cpu: torch.Tensor
) -> None:
    """A random op's second draws against CPU's, where the first call's passed."""
    if cpu.numel() < oracles.MIN_DRAWS or cpu.shape != again.shape:
        return  # too few draws to judge alone (the first call's are pooled with reruns)
    problem = oracles.distribution_problem(again, cpu)
    if not problem:
        return  # (the first call's draws are judged only then: most second draws pass)
    if oracles.distribution_problem(first, cpu) is not None:
        return  # the first call's draws are wrong too: the written check names it
    raise Mismatch(
        "values",
        f"{arg}: called again on the same inputs (below autograd) the kernel drew values "
        f"CPU's draws contradict: {problem}",
    )


def _returns_written(s: Sample, result: Any, dev: Materialized, where: str) -> None:
    written = [view for leaf, _, view in dev.bases if leaf.written]
    is_out = any(leaf.arg == "out" for leaf, _, _ in dev.bases if leaf.written)
    for _, t, info in returned(s.schema, result):
        if info is not None and info.is_write and not any(t is w for w in written):
            what, kind = ("out= tensor", "out") if is_out else ("self", "inplace")
            raise Mismatch(
                kind,
                f"returned a new tensor instead of the {what} it wrote ({where}; "
                f"returned {_describe(t)}, {what} is {_describe(written[0]) if written else '?'})",
            )


def _describe(t: torch.Tensor) -> str:
    return f"{list(t.shape)} at data_ptr {t.data_ptr():#x}"


@sample_check(
    "aliasing",
    "views share storage with their input, functional outputs do not",
    needs=("storage",),
)
def check_aliasing(s: Sample) -> None:
    if not s.spec.check_aliasing:
        return
    dev = s.dev
    inputs = [view for _, _, view in dev.bases]
    for index, t, info in returned(s.schema, s.actual.result):
        if info is not None and info.is_write:
            continue  # the identity check covers these
        if info is not None:
            if t.numel() and not any(same_storage(t, x) for x in inputs):
                raise Mismatch(
                    "view", "view op returned a tensor that does not share storage with its input"
                )
        elif t.numel():
            for position, x in enumerate(inputs):
                if x.numel() and same_storage(t, x) and not _cpu_aliases(s, index, position):
                    raise Mismatch(
                        "aliasing",
                        "output shares storage with input (a functional op must return new memory)",
                    )


def _cpu_aliases(s: Sample, index: int, position: int) -> bool:
    """Whether CPU's own call returned output `index` sharing storage with input `position`
    too: a composite whose schema declares no alias may return its input (`dropout` in eval
    mode returns `input` itself), and a device that does as CPU does is not wrong."""
    if s.expected.exc is not None:
        return False
    cpu_inputs = [view for _, _, view in s.cpu.bases]
    if position >= len(cpu_inputs):
        return False
    for i, t, _ in returned(s.schema, s.expected.result):
        if i == index:
            return bool(t.numel()) and same_storage(t, cpu_inputs[position])
    return False


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.layout != torch.strided or b.layout != torch.strided:
        return False
    # the pointers first: comparing devices builds two torch.device objects (every sample asks)
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.device == b.device
