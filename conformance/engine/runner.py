"""Run one case (overload x dtype x layout x path) against CPU and apply every check.

Per sample: the CPU reference, also on contiguous copies of the same values when the layout is
not contiguous (`consistency.py`: CPU must agree with itself, else the sample is a `torch-bug`
and the device is judged against the layout-free result), then the device; random ops run right
after the same seed on both sides. A failed case is then checked against the foundations
(`foundations.py`): when the failed sample evidently used a broken foundation (the harness needs
it, or the profile of the sample shows the broken use), it is blocked by it; otherwise the
case fails on its own and names the broken foundation it might be related to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import (  # noqa: F401 - bits registers its checks
    bits,
    checks,
    compiling,
    consistency,
    dynamic_shapes,
    evidence,
    gradients,
    memory,
    oracles,
    parametric,
    syncing,
)
from conformance.engine.backend import Backend
from conformance.engine.calls import Call
from conformance.engine.checks import NotApplicable, Outcome, Unsupported, invoke, settle, version
from conformance.engine.compare import ErrorStats, Mismatch
from conformance.engine.discovery import resolve
from conformance.engine.exactness import Exactness
from conformance.engine.foundations import Blame, Foundations, Probe
from conformance.engine.placing import Materialized, PlacedCall, place
from conformance.engine.spec import OpSpec


@dataclass
class CaseOutcome:
    """What a case measured; `failure` is the first failed check, if any."""

    samples: int = 0  # samples compared (values or error parity)
    stats: ErrorStats = field(default_factory=ErrorStats)
    failure: Mismatch | None = None
    failed_sample: str | None = None
    failed_call: PlacedCall | None = None  # for standalone repro scripts
    skip_reason: str | None = None
    unsupported: str | None = None  # the first "not implemented" of the device
    # whether CPU computed a sample the device said "not implemented" for (else CPU raised too)
    unsupported_cpu_computes: bool = False
    not_applicable: str | None = None  # the first sample that says nothing about this case
    torch_bugs: list[str] = field(default_factory=list)  # CPU disagreed with itself
    blocked_by: Probe | None = None  # a broken foundation this failure depends on
    related: Probe | None = None  # a broken foundation it might be related to (not blocking)
    blame_error: str | None = None  # why blame could not be computed (the verdict stands)
    context: RunContext | None = None  # how the samples ran (for blame, after the verdict)
    errors_only: bool = False  # every compared sample raised on CPU (error parity only)
    # a lazy device's own evidence: the ops its runtime counted as fallen back to CPU during
    # the device calls of the case (engine/lazy.py)
    fell_back: set[str] = field(default_factory=set)
    sync: syncing.SyncEvidence = field(default_factory=syncing.SyncEvidence)  # -sync cases
    compiled: dynamic_shapes.CompileEvidence = field(default_factory=dynamic_shapes.CompileEvidence)


@dataclass(frozen=True)
class RunContext:
    """How to run the samples of one case."""

    backend: Backend
    op: torch._ops.OpOverload
    overload: str
    spec: OpSpec
    route: str | None  # routed through cpu_fallback for the device call
    via_fallback: bool
    strict_errors: bool
    nondeterministic: bool
    mode: str = ""  # "" (the forward call), "grad" or "inference" (CaseId.values)
    exactness: Exactness | None = None  # CPU's result is exact: the rounding check applies
    flushes_subnormals: bool = False  # declared by the manifest for the case's dtype
    evidence: bool = False  # tolerances from CPU's own error per sample (engine/evidence.py)


def run_case(
    backend: Backend,
    overload: str,
    spec: OpSpec,
    calls: list[Call],
    layout: str,
    path: str,
    route: bool = True,
    strict_errors: bool = False,
    foundations: Foundations | None = None,
    mode: str = "",
    placements: list[PlacedCall] | None = None,
    exactness: Exactness | None = None,
    flushes_subnormals: bool = False,
    evidence: bool = False,
) -> CaseOutcome:
    """Run every sample of the case; stop at the first failed check.

    path 'fallback' with route=True routes a natively registered overload through
    cpu_fallback with the backend's switch; route=False: the overload has no kernel and
    reaches the fallback by itself. `mode`: "grad" compares gradients (`gradients.py`),
    "inference" runs the samples on inference tensors inside `torch.inference_mode()`.
    `exactness`: whether CPU's result of (overload, dtype) is exact (engine/exactness.py);
    `flushes_subnormals`: the manifest says the device flushes them in this dtype;
    `evidence`: each sample's tolerance is CPU's own error against float64 (engine/evidence.py:
    the -sizes cases).
    `placements`: `placed_calls(calls, layout, ...)` computed earlier (the cases of one overload,
    dtype and layout share their placements and what depends on them alone)."""
    op = resolve(overload)
    outcome = CaseOutcome()
    if placements is None:
        placements = placed_calls(calls, layout, op._schema, spec.written_args, mode != "grad")
    if mode == "grad":
        placements = placements[: gradients.MAX_GRAD_SAMPLES]
    if mode == "sync":
        placements = placements[: syncing.MAX_SYNC_SAMPLES]
    if mode == "compile":
        placements = placements[: compiling.MAX_COMPILE_SAMPLES]
    if not placements:
        outcome.skip_reason = (
            f"no sample of {overload} has an input that the '{layout}' layout applies to"
            if calls
            else f"no samples for {overload} with this dtype"
        )
        return outcome
    nondeterministic = (
        spec.nondeterministic
        if spec.nondeterministic is not None
        else oracles.is_nondeterministic(op)
    )
    ctx = RunContext(
        backend,
        op,
        overload,
        spec,
        overload if path == "fallback" and route else None,
        path == "fallback",
        strict_errors,
        nondeterministic,
        mode,
        exactness,
        flushes_subnormals,
        evidence,
    )
    outcome.context = ctx
    watch = memory.MemoryWatch(backend)
    values_compared = 0
    for placed in placements:
        failure, compared = None, False
        try:
            if mode == "compile":
                bug = compiling.run_compile_sample(
                    op,
                    placed,
                    backend.device,
                    backend.compiler,
                    spec.tol_scale,
                    outcome.stats,
                    other=backend.other_device if placed is placements[0] else None,
                )
                raised = False
            elif mode == "sync":
                if backend.lazy is None:
                    raise NotApplicable("no lazy runtime: nothing to sync")
                syncing.run_sync_sample(
                    backend.lazy,
                    op,
                    placed,
                    backend.device,
                    spec.tol_scale,
                    outcome.stats,
                    outcome.sync,
                    on_device=lambda: backend.routed_through_fallback(ctx.route),
                )
                raised, bug = False, None
            elif mode == "grad":
                gradients.run_grad_sample(
                    op,
                    placed,
                    backend.device,
                    spec.tol_scale,
                    outcome.stats,
                    on_device=lambda: backend.routed_through_fallback(ctx.route),
                    reference=spec.reference,
                )
                raised, bug = False, None
            else:
                raised, bug = _run_sample(ctx, placed, outcome.stats, outcome.fell_back)
            compared = True
            if bug:
                outcome.torch_bugs.append(f"{placed.signature()}: {bug}")
            values_compared += not raised
        except NotApplicable as exc:
            outcome.not_applicable = outcome.not_applicable or str(exc)
        except Unsupported as exc:  # the first, preferring one where CPU computes
            if outcome.unsupported is None or (
                exc.cpu_computes and not outcome.unsupported_cpu_computes
            ):
                outcome.unsupported = exc.message
                outcome.unsupported_cpu_computes = exc.cpu_computes
                outcome.failed_sample, outcome.failed_call = placed.signature(), placed
        except Mismatch as exc:
            failure = exc
        except Exception as exc:  # the checks themselves broke: report, do not hide
            failure = Mismatch(
                "harness",
                f"the suite failed while checking this sample: "
                f"{type(exc).__name__}: {checks.first_line(exc)}",
            )
        try:  # memory corruption is the root cause of whatever else went wrong: it wins
            watch.check_after(overload)
        except Mismatch as exc:
            failure = exc
        if failure is not None:
            outcome.failure = failure
            outcome.failed_sample = placed.signature()
            outcome.failed_call = placed
            break
        outcome.samples += compared
    if mode == "compile" and outcome.failure is None and outcome.samples:
        try:
            bug = dynamic_shapes.run_dynamic(
                op,
                placements,
                backend.device,
                backend.compiler,
                spec.tol_scale,
                outcome.stats,
                outcome.compiled,
            )
            if bug:
                outcome.torch_bugs.append(f"dynamic shapes: {bug}")
        except dynamic_shapes.DynamicMismatch as exc:
            outcome.failure = exc
            outcome.failed_sample, outcome.failed_call = exc.placed.signature(), exc.placed
    if outcome.failure is None and nondeterministic and layout == "contiguous" and not mode:
        problem = _parametric(ctx, calls)
        if problem is not None:
            outcome.failure = Mismatch("values", f"random draws: {problem}")
            outcome.failed_sample = f"{overload}: one draw of {parametric.DRAWS} values"
    if outcome.failure is None:
        try:
            watch.check_leaks(overload)
        except Mismatch as failure:
            outcome.failure = failure
    outcome.errors_only = outcome.samples > 0 and values_compared == 0
    if not outcome.samples and not outcome.unsupported and outcome.failure is None:
        outcome.skip_reason = outcome.not_applicable
    if foundations is not None:
        found = blame(outcome, foundations, layout)
        outcome.blocked_by, outcome.related = found.blocked_by, found.related
    return outcome


def blame(outcome: CaseOutcome, foundations: Foundations, layout: str) -> Blame:
    """The broken foundation a failed (or unsupported) case depends on by evidence, or one it
    might be related to: a diagnostic that runs after the case's own verdict (it probes
    foundations and re-runs the failed sample under the profiler)."""
    if outcome.context is None or not (outcome.failure or outcome.unsupported):
        return Blame()
    ctx, placed, failure = outcome.context, outcome.failed_call, outcome.failure
    if placed is None or (failure is not None and failure.check in ("memory", "leak")):
        return Blame()  # the case's own memory problem
    leaves = placed.tensor_leaves()
    dtype = leaves[0].placement.base.dtype if leaves else torch.float32
    if failure is not None and failure.check == "harness":
        calls: Callable[[], set[str]] = set  # only what the harness itself needs is evidence
    else:
        calls = lambda: _ops_called(ctx, placed)  # noqa: E731
    # a -grad failure names the layout of the grad_outputs it failed with: the memory it used
    layout = getattr(failure, "layout", None) or layout
    # a backward reaches more than the op's own foundations: no rank limit for -grad cases
    overload = "" if ctx.mode == "grad" else ctx.overload
    own = failure.message if failure is not None else outcome.unsupported or ""
    return foundations.blame(
        overload, dtype, layout, calls, ctx.via_fallback, own=own, case_overload=ctx.overload
    )


def _ops_called(ctx: RunContext, placed: PlacedCall) -> set[str]:
    """The aten ops the device call of `placed` reaches, nested calls included: the autograd
    profiler without kineto (milliseconds; kineto's first use costs seconds per process)."""
    from torch.autograd.profiler import profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(use_kineto=False) as prof:
            if ctx.mode == "grad":  # forward and backward: the gradient's ops are evidence too
                try:
                    gradients.run_grad_sample(
                        ctx.op,
                        placed,
                        ctx.backend.device,
                        ctx.spec.tol_scale,
                        ErrorStats(),
                        on_device=lambda: ctx.backend.routed_through_fallback(ctx.route),
                    )
                except Exception:  # noqa: BLE001 - the failure is known; the ops are wanted
                    pass
            else:
                dev = placed.materialize(ctx.backend.device)
                with ctx.backend.routed_through_fallback(ctx.route), mode_context(ctx.mode)():
                    invoke(ctx.op, dev, seeded=ctx.nondeterministic)
    return {e.name.removeprefix("aten::") for e in prof.function_events}


def _parametric(ctx: RunContext, calls: list[Call]) -> str | None:
    """The large draw of a random op with known parameters (engine/parametric.py), on the
    case's path."""

    def on_device(draw: Callable[[], Any]) -> Any:
        with ctx.backend.routed_through_fallback(ctx.route), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return draw()
            except Exception:  # noqa: BLE001 - the samples judged the device's errors
                return None

    return parametric.check(ctx.op, ctx.overload, calls, ctx.backend.device, on_device)


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
    leaves, _ = tree_flatten(outcome.result)
    return leaves + [view for leaf, _, view in m.bases if leaf.written]


def _compared_values(spec: OpSpec, outcome: Outcome) -> Callable[[int], bool]:
    """Which of `_observed`'s values the checks compare element by element (the rest, such as
    uninitialised memory, only by metadata): a reference may differ there from run to run."""
    outputs = len(tree_flatten(outcome.result)[0]) if outcome.exc is None else 0

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


def placed_calls(
    calls: list[Call], layout: str, schema, written: tuple[str, ...], resize: bool = True
) -> list[PlacedCall]:
    """The samples placed in `layout` (those it changes; on the contiguous layout also an out=
    resized from empty, unless `resize` is off: the -grad cases)."""
    out = []
    has_out = any(
        a.alias_info is not None and a.alias_info.is_write and a.kwarg_only
        for a in schema.arguments
    )
    for call in calls:
        p = place(call, layout, schema, written=written)
        if p is not None:
            out.append(p)
        if has_out and layout == "contiguous" and resize:
            resized = place(call, layout, schema, resize_out=True, written=written)
            if resized is not None:
                out.append(resized)
    return out


def mode_context(mode: str) -> Callable[[], contextlib.AbstractContextManager]:
    """What a sample of the case's mode is built and run inside: `torch.inference_mode` for
    -inference cases (inference tensors, no ADInplaceOrView), nothing otherwise."""
    return torch.inference_mode if mode == "inference" else contextlib.nullcontext


#: where the suite's heap red zones (engine/heap.py) are checked within a sample, so that a block
#: the harness's own copies smashed is not charged to the op under test
PLACING = (
    "while placing the inputs on the device (before the op ran: the device's empty_strided, "
    "_copy_from and as_strided)"
)


def _heap_phase(backend: Backend, where: str) -> None:
    """The heap red zones checked between two phases of a sample (memory.heap_check)."""
    memory.heap_check(backend, where)


def _run_sample(
    ctx: RunContext, placed: PlacedCall, stats: ErrorStats, fell_back: set[str]
) -> tuple[bool, str | None]:
    """Run and check one sample: (whether a side raised, CPU's layout inconsistency or None).
    On a lazy device the call is settled at a sync point (an error there is the call's) and
    the ops that fell back to CPU meanwhile are added to `fell_back`. Raises Mismatch (or
    Unsupported / NotApplicable)."""
    backend, spec = ctx.backend, ctx.spec
    reference = spec.reference or ctx.op
    mode = mode_context(ctx.mode)
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
        written = [view for leaf, _, view in cpu.bases if leaf.written]
        scale = evidence.measured_scale(reference, ctx.op._schema, placed, expected.result, written)
        if scale is not None:  # CPU's own error on this sample: the tolerance
            spec = dataclasses.replace(spec, tol_scale=scale)
    free = None
    if placed.layout != "contiguous" and not ctx.nondeterministic:
        # the same for every case that shares this placement (the paths, the modes)
        if "layout_free" not in placed.memo:
            placed.memo["layout_free"] = consistency.layout_free(
                ctx.op, spec, placed, reference, expected
            )
        free = placed.memo["layout_free"]
    bug = consistency.disagreement(spec, cpu, expected, free) if free is not None else None
    count_before = backend.fallback_count(ctx.overload)
    lazy = backend.lazy
    counts = lazy.counts() if lazy is not None else None
    with backend.routed_through_fallback(ctx.route), mode():
        actual = invoke(ctx.op, dev, ctx.nondeterministic)
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
            flushes_subnormals=ctx.flushes_subnormals,
        )

    if bug is None:
        try:
            checks.run_checks(sample(cpu, expected))
        except Unsupported:
            raise
        except Mismatch:
            unstable = _unstable_reference(ctx, placed, cpu, expected)
            if unstable is None:
                raise
            return False, unstable
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
