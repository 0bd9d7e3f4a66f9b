"""One sample of the forward call, run and checked: the CPU reference (also on contiguous copies
where the layout is not contiguous: `consistency.py`), the device (settled at a sync point on a
lazy device), every registered check (`checks.py`), the heap red zones between the phases, and
whether CPU's reference is stable enough to judge by. The plain mode's sample
(engine/modes/plain.py); the -inference mode runs it inside `torch.inference_mode()`."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from conformance.engine import (  # noqa: F401 - these *_checks and bits register their checks
    alias_checks,
    bits,
    checks,
    consistency,
    error_checks,
    evidence,
    memory,
    unvectorised,
    write_checks,
)
from conformance.engine.backend import Backend
from conformance.engine.checks import Outcome, Unsupported, invoke, settle, version
from conformance.engine.compare import ErrorStats, Mismatch
from conformance.engine.outcome import RunContext
from conformance.engine.placing import Materialized, PlacedCall
from conformance.engine.profile import DeviceProfile
from conformance.engine.spec import OpSpec


def _unstable_reference(
    ctx: RunContext, placed: PlacedCall, cpu: Materialized, expected: Outcome
) -> str | None:
    """Why CPU's reference cannot judge this sample, if a second run of it on the same fresh
    inputs gives another result (a kernel that reads uninitialised memory: the verdict would
    flip from run to run between failed and torch-bug); None when both runs agree. Asked only
    for a sample that failed or disagreed with itself, so a passing run never pays."""
    if ctx.nondeterministic:
        return None
    reference = ctx.spec.reference or ctx.op
    again_args = placed.materialize("cpu")
    again = invoke(reference, again_args, False)
    first = _observed(expected, cpu)
    second = _observed(again, again_args)
    difference = _first_difference(first, second, _compared_values(ctx.spec, expected))
    if difference is None:
        return None
    return (
        f"cpu's reference is nondeterministic: two runs of the same sample on the same inputs "
        f"differ ({difference}); nothing to judge the device against (does cpu's kernel read "
        "uninitialised memory?)"
    )


def _observed(outcome: Outcome, m: Materialized) -> list[Any]:
    """What a CPU run produced: the exception type, or the result's and written args' tensors."""
    if outcome.exc is not None:
        return [type(outcome.exc).__name__]
    leaves = outcome.flat()[0]
    return leaves + [view for leaf, _, view in m.bases if leaf.written]


def _compared_values(spec: OpSpec, outcome: Outcome) -> Callable[[int], bool]:
    """Which of `_observed`'s values the checks compare element by element (the rest, such as
    uninitialised memory, only by metadata): a reference may differ there from run to run."""
    outputs = len(outcome.flat()[0]) if outcome.exc is None else 0

    def compared(i: int) -> bool:
        if not spec.check_values:
            return False
        if i >= outputs:
            return True  # a written argument
        if i in spec.metadata_only_outputs:
            return False
        return spec.compared_outputs is None or i in spec.compared_outputs

    return compared


def _first_difference(
    a: list[Any], b: list[Any], compared: Callable[[int], bool] = lambda i: True
) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} values, then {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return f"value {i}: {x.dtype}{list(x.shape)}, then {y.dtype}{list(y.shape)}"
            if x.is_quantized or x.layout != torch.strided or x.numel() == 0 or not compared(i):
                continue
            same = x == y
            if x.is_floating_point() or x.is_complex():
                same |= x.isnan() & y.isnan()
            if not bool(same.all()):
                return f"value {i}: {int((~same).sum())} of {x.numel()} elements"
        elif x != y and not (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            return f"value {i}: {x!r}, then {y!r}"
    return None


#: where the suite's heap red zones (engine/heap.py) are checked within a sample, so that a block
#: the harness's own copies smashed is not charged to the op under test
PLACING = (
    "while placing the inputs on the device (before the op ran: the device's empty_strided, "
    "_copy_from and as_strided)"
)


def _heap_phase(backend: Backend, where: str) -> None:
    """The heap red zones checked between two phases of a sample (memory.heap_check)."""
    memory.heap_check(backend, where)


def run_sample(
    ctx: RunContext, placed: PlacedCall, stats: ErrorStats, fell_back: set[str]
) -> tuple[bool, str | None]:
    """Run and check one sample: (whether a side raised, CPU's layout inconsistency or None).
    On a lazy device the call is settled at a sync point (an error there is the call's) and
    the ops that fell back to CPU meanwhile are added to `fell_back`. Raises Mismatch (or
    Unsupported / NotApplicable)."""
    backend, spec = ctx.backend, ctx.spec
    reference = spec.reference or ctx.op
    mode = ctx.mode.context
    with mode():  # inference tensors, when the case runs in inference mode
        cpu = placed.materialize("cpu")
        dev = placed.materialize(backend.device)
    _heap_phase(backend, PLACING)
    written_before = [
        (version(view), view.data_ptr()) for leaf, _, view in dev.bases if leaf.written
    ]
    cpu_before = [(version(view), view.data_ptr()) for leaf, _, view in cpu.bases if leaf.written]
    with mode():
        expected = invoke(reference, cpu, ctx.nondeterministic)
    if ctx.evidence and expected.exc is None and not ctx.nondeterministic:
        written = dict(cpu.written())
        scale = evidence.measured_scale(
            reference, ctx.op._schema, placed, expected.result, written, ctx.overload
        )
        if scale is not None:  # CPU's own error on this sample: the tolerance
            spec = dataclasses.replace(spec, tol_scale=scale)
    free = None
    if placed.layout != "contiguous" and not ctx.nondeterministic and not placed.contiguous():
        # run once for every case of the sample that shares its copies (consistency.py)
        free = consistency.layout_free(ctx.op, spec, placed, reference, expected)
    elif placed.layout == "contiguous" and not ctx.mode.name and not ctx.nondeterministic:
        consistency.keep_contiguous_run(ctx.op, spec, placed, reference, cpu, expected)
    bug = consistency.disagreement(spec, cpu, expected, free) if free is not None else None
    count_before = backend.fallback_count(ctx.overload)
    lazy = backend.lazy
    counts = lazy.counts() if lazy is not None else None
    with backend.routed_through_fallback(ctx.route), mode():
        started = time.perf_counter()
        actual = invoke(ctx.op, dev, ctx.nondeterministic, device=True)
        backend.first_calls.setdefault(ctx.overload, time.perf_counter() - started)
    _heap_phase(backend, f"in {ctx.overload} (its own call, before its results were read)")
    if lazy is not None and counts is not None:
        actual = settle(lazy, actual)
        fell_back.update(lazy.counts().fell_back(counts))

    def sample(cpu_side: Materialized, expected_side: Outcome) -> checks.Sample:
        return checks.Sample(
            backend=backend,
            op=ctx.op,
            overload=ctx.overload,
            spec=spec,
            placed=placed,
            cpu=cpu_side,
            dev=dev,
            expected=expected_side,
            actual=actual,
            stats=stats,
            via_fallback=ctx.via_fallback,
            fallback_count_before=count_before,
            written_before=written_before,
            cpu_written_before=cpu_before,
            route=ctx.route,
            strict_errors=ctx.strict_errors,
            nondeterministic=ctx.nondeterministic,
            torch_bug=bug,
            layout_free_bumps=free.bumped if free is not None else None,
            exactness=ctx.exactness,
            policy=ctx.policy,
            notes=ctx.notes,
        )

    if bug is None:
        try:
            checks.run_checks(sample(cpu, expected))
        except Unsupported:
            raise
        except Mismatch:
            unstable = _unstable_reference(ctx, placed, cpu, expected)
            if unstable is not None:
                return False, unstable
            vectorised = unvectorised.fix_vectorised_nans(ctx.overload, reference, placed, expected)
            if vectorised is None:
                raise
            checks.run_checks(sample(cpu, expected))  # against the one-element values
            return False, vectorised
        return expected.exc is not None or actual.exc is not None, None
    assert free is not None
    unstable = _unstable_reference(ctx, placed, cpu, expected)
    if unstable is not None:  # CPU disagrees with itself on the same layout: no layout bug
        return False, unstable
    fixed = placed.materialize("cpu")
    fixed_expected = invoke(reference, fixed, ctx.nondeterministic)
    consistency.adopt(fixed, fixed_expected, free)
    try:  # judged against the layout-free result
        checks.run_checks(sample(fixed, fixed_expected))
    except Unsupported:
        raise
    except Mismatch as judged:
        try:  # the device may reproduce CPU's own bug (e.g. through cpu_fallback): not its fault
            checks.run_checks(sample(cpu, expected))
        except Unsupported:
            raise
        except Mismatch as strided:
            # a result that is neither of CPU's is the device's own: never excused by CPU's bug
            raise Mismatch(
                judged.check,
                f"{judged.message} (against cpu on contiguous copies); against cpu on this "
                f"layout: {strided.message}; the device matches neither of cpu's two results "
                f"({bug})",
                judged.max_abs,
                judged.max_rel,
            ) from None
        bug += "; the device gives cpu's layout-dependent result"
    return False, bug


def checks_left_out(profile: DeviceProfile) -> dict[str, str]:
    """{check: why} for the checks (all registered: this module imports them) that the
    device's profile leaves out (run header, run.json, the capability query)."""
    return {c.name: why for c in checks.CHECKS if c.needs and (why := profile.missing(c.needs))}
