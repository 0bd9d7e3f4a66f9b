"""Run one case (overload x dtype x layout x path x mode) against CPU and apply every check.

Per sample the case's mode (engine/modes/) runs it: the plain forward call (sample_run.py: the
CPU reference, also on contiguous copies of the same values when the layout is not contiguous,
then the device, then every check), gradients, inference mode, sync points or torch.compile.
Random ops run right after the same seed on both sides; those with known parameters also get
one large draw (parametric.py). A failed case is then checked against the foundations
(`foundations.py`): when the failed sample evidently used a broken foundation (the harness needs
it, or the profile of the sample shows the broken use), it is blocked by it; otherwise the
case fails on its own and names the broken foundation it might be related to.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import torch

from conformance.engine import checks, memory, modes, oracles, parametric
from conformance.engine.backend import Backend
from conformance.engine.calls import Call
from conformance.engine.checks import NotApplicable, Unsupported
from conformance.engine.compare import Mismatch
from conformance.engine.discovery import resolve
from conformance.engine.exactness import Exactness
from conformance.engine.foundations import Blame, Foundations
from conformance.engine.modes import CaseMode
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import PlacedCall, place
from conformance.engine.precision import DtypePolicy
from conformance.engine.siblings import _is_out
from conformance.engine.spec import OpSpec
from conformance.engine.transfer import LazyRunError

__all__ = ("CaseOutcome", "RunContext", "blame", "placed_calls", "run_case")


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
    mode: CaseMode | str = "",
    placements: list[PlacedCall] | None = None,
    exactness: Exactness | None = None,
    policy: DtypePolicy | None = None,
    evidence: bool = False,
    smallest_failing: bool = False,
) -> CaseOutcome:
    """Run every sample of the case; stop at the first failed check.

    path 'fallback' with route=True routes a natively registered overload through
    cpu_fallback with the backend's switch; route=False: the overload has no kernel and
    reaches the fallback by itself. `mode`: how each sample runs (engine/modes/, or a mode's
    name: the plain forward call, "grad" compares gradients, "inference" runs the samples on
    inference tensors inside `torch.inference_mode()`, ...).
    `exactness`: whether CPU's result of (overload, dtype) is exact (engine/exactness.py);
    `policy`: what the manifest declares of the device's arithmetic in the case's dtype
    (engine/precision.py: flushes subnormals, computes in the dtype);
    `evidence`: each sample's tolerance is CPU's own error against float64 (engine/evidence.py:
    the -sizes cases).
    `placements`: `placed_calls(calls, layout, ...)` computed earlier (the cases of one overload,
    dtype and layout share their placements and what depends on them alone).
    `smallest_failing` (--repro-dir): after a failure, smaller samples are tried for the repro
    (`repro_call`); the verdict stays the first failure's."""
    op = resolve(overload)
    mode = modes.mode_of(mode) if isinstance(mode, str) else mode
    outcome = CaseOutcome(evidence=mode.new_evidence())
    if placements is None:
        placements = placed_calls(calls, layout, op._schema, spec.written_args, mode.resize_out)
    if mode.max_samples is not None:
        placements = placements[: mode.max_samples]
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
        policy or DtypePolicy(),
        evidence,
    )
    outcome.context = ctx
    oracles.use_seeding(backend.seed_generators)
    runtime_before = _runtime_seconds(backend)
    called_before = overload in backend.first_calls
    outcome.notes = ctx.notes  # the checks' notes on samples that passed
    watch = memory.MemoryWatch(backend)
    values_compared = 0
    for placed in placements:
        failure, compared = None, False
        try:
            raised, bug = mode.run_sample(ctx, placed, outcome, placed is placements[0])
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
        except LazyRunError as exc:  # the device's graph failed when a result was read
            failure = Mismatch(
                "error",
                f"the device raised when a result it returned was read back (its pending graph "
                f"ran there); cpu computes: {exc}",
            )
        except Exception as exc:  # the checks broke: the device's sticky error, or ours
            failure = _broken_check(backend, overload, exc)
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
    if outcome.failure is not None and smallest_failing:
        _smallest_failing(ctx, mode, placements, outcome)
    if outcome.failure is None and outcome.samples:
        mode.after(ctx, placements, outcome)
    if outcome.failure is None:
        outcome.failure = _settled(backend, overload)
    plain = not mode.name
    if outcome.failure is None and nondeterministic and layout == "contiguous" and plain:
        problem = _parametric(ctx, calls)
        if problem is not None:
            outcome.failure = Mismatch("values", f"random draws: {problem}")
            outcome.failed_sample = f"{overload}: one draw of {parametric.DRAWS} values"
    if outcome.failure is None:
        try:
            watch.check_leaks(overload)
        except Mismatch as failure:
            outcome.failure = _kept_once(mode, ctx, placements, outcome, watch, failure)
    outcome.errors_only = outcome.samples > 0 and values_compared == 0
    if runtime_before is not None:
        compiled, executed = _runtime_seconds(backend) or (0.0, 0.0)
        outcome.compile_seconds = compiled - runtime_before[0]
        outcome.execute_seconds = executed - runtime_before[1]
    elif not called_before and overload in backend.first_calls:  # where a JIT backend compiles
        outcome.first_call_seconds = backend.first_calls[overload]
    if not outcome.samples and not outcome.unsupported and outcome.failure is None:
        outcome.skip_reason = outcome.not_applicable
    if foundations is not None:
        found = blame(outcome, foundations, layout)
        outcome.blocked_by, outcome.related = found.blocked_by, found.related
    return outcome


#: failures whose repro is never traded for a smaller sample: after memory corruption or the
#: suite's own error the device's later answers are not evidence
_KEEP_SAMPLE = frozenset({"memory", "leak", "harness"})
#: smaller samples tried for a repro, smallest first
SHRINK_TRIES = 8


def _elements(placed: PlacedCall) -> int:
    return sum(math.prod(leaf.placement.size) for leaf in placed.tensor_leaves())


def _smallest_failing(
    ctx: RunContext, mode: CaseMode, placements: list[PlacedCall], outcome: CaseOutcome
) -> None:
    """The smallest sample that fails the same check worded alike (up to SHRINK_TRIES samples
    smaller than the failing one, smallest first), kept as the repro's sample: a report shows
    the fewest elements that still show the divergence. Worded otherwise it is another one: a
    zero-size sample of torch_xla's `_log_softmax_backward_data` failed `error` for another
    reason than the lowering error its case was reported for, and its script showed nothing."""
    failure, failed = outcome.failure, outcome.failed_call
    if failure is None or failed is None or failure.check in _KEEP_SAMPLE:
        return
    size = _elements(failed)
    smaller = sorted((p for p in placements if _elements(p) < size), key=_elements)
    for placed in smaller[:SHRINK_TRIES]:
        try:
            mode.run_sample(ctx, placed, CaseOutcome(evidence=mode.new_evidence()), False)
        except Mismatch as exc:
            if exc.check == failure.check and _worded_alike(exc.message, failure.message):
                outcome.repro_call, outcome.repro_failure = placed, exc
                return
        except Exception:  # noqa: BLE001, S112 - another problem is not this repro's
            continue


#: what varies between samples showing one divergence: numbers, shapes, bracketed lists
_VARIES = re.compile(r"\[[^\]]*\]|\([^)]*\)|\{[^}]*\}|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _worded_alike(a: str, b: str) -> bool:
    """Two failures' first lines alike once what varies between samples is masked."""

    def first(message: str) -> str:
        return _VARIES.sub("#", message.split("\n", 1)[0])

    return first(a) == first(b)


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
    overload = "" if ctx.mode.blames_any_overload else ctx.overload
    own = failure.message if failure is not None else outcome.unsupported or ""
    return foundations.blame(
        overload, dtype, layout, calls, ctx.via_fallback, own=own, case_overload=ctx.overload
    )


def _ops_called(ctx: RunContext, placed: PlacedCall) -> set[str]:
    """The aten ops the device call of `placed` reaches, nested calls included (the mode's
    replay): the autograd profiler without kineto (milliseconds; kineto's first use costs
    seconds per process)."""
    from torch.autograd.profiler import profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(use_kineto=False) as prof:
            ctx.mode.replay(ctx, placed)
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


def placed_calls(
    calls: list[Call], layout: str, schema, written: tuple[str, ...], resize: bool = True
) -> list[PlacedCall]:
    """The samples placed in `layout` (those it changes; on the contiguous layout also an out=
    resized from empty, unless `resize` is off: the -grad cases)."""
    out = []
    has_out = any(_is_out(a) for a in schema.arguments)
    for call in calls:
        p = place(call, layout, schema, written=written)
        if p is not None:
            out.append(p)
        if has_out and layout == "contiguous" and resize:
            resized = place(call, layout, schema, resize_out=True, written=written)
            if resized is not None:
                out.append(resized)
    return out


def _kept_once(
    mode: CaseMode,
    ctx: RunContext,
    placements: list[PlacedCall],
    outcome: CaseOutcome,
    watch: memory.MemoryWatch,
    failure: Mismatch,
) -> Mismatch | None:
    """Memory a case left allocated is a leak where a second call adds to it. A library's
    workspace or a cache is allocated once and kept (cuBLAS keeps a 32 MiB workspace per handle
    after its first GEMM: an H200's first addmm, addbmm, baddbmm.out and _linalg_det cases
    failed `leak` by exactly that): every sample runs once more, and memory that stayed as it
    was is a note, not a failure. Every sample, not only the first (issue 79: a kernel that
    kept memory only on calls past 1,024 elements passed, its first sample being small)."""
    watch.mark()
    try:
        for placed in placements:
            mode.run_sample(ctx, placed, outcome, False)
        watch.check_leaks(ctx.overload)
    except Exception:  # noqa: BLE001 - grown again, or no second call to judge by: a leak
        return failure
    outcome.notes.append(
        f"{failure.message.splitlines()[0]}; a second call allocated no more: kept once (a "
        "workspace or a cache), not a leak"
    )
    return None


def _settled(backend: Backend, overload: str) -> Mismatch | None:
    """The case's work run to its end: an asynchronous error of its calls (a CUDA kernel's
    device-side assert, say) raised at this synchronize is this case's, never the next one's."""
    try:
        backend.synchronize()
    except Exception as exc:  # noqa: BLE001 - the device's error
        return Mismatch(
            "error",
            f"the device raised after {overload}'s calls returned, at the synchronize that ends "
            f"the case (an asynchronous error of its work): {type(exc).__name__}: "
            f"{checks.first_line(exc)}",
        )
    return None


def _broken_check(backend: Backend, overload: str, exc: Exception) -> Mismatch:
    """An exception the checks did not expect: the device's, where the device has become
    unusable in this process (a sticky error of this case's work: the previous case ended with
    a synchronize that passed), else the suite's own (reported, never hidden)."""
    why = backend.unusable()
    if why is not None:
        return Mismatch(
            "error",
            f"the device failed while the suite read back {overload}'s results, and is unusable "
            f"in this process since (a sticky asynchronous error of this case's work): "
            f"{type(exc).__name__}: {checks.first_line(exc)}",
        )
    return Mismatch(
        "harness",
        f"the suite failed while checking this sample: {type(exc).__name__}: "
        f"{checks.first_line(exc)}",
    )


def _runtime_seconds(backend: Backend) -> tuple[float, float] | None:
    """A lazy runtime's own time so far in this process: (compiling, executing) seconds; None
    on an eager device or a runtime without the metrics."""
    lazy = backend.lazy
    compiled = lazy.compile_seconds() if lazy is not None else None
    if lazy is None or compiled is None:
        return None
    return compiled, lazy.execute_seconds() or 0.0
