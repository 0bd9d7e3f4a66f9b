"""Run one case (overload x dtype x layout x path) against CPU and apply every check."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from conformance.engine import checks, memory
from conformance.engine.backend import Backend
from conformance.engine.calls import Call
from conformance.engine.checks import Outcome
from conformance.engine.compare import ErrorStats, Mismatch
from conformance.engine.discovery import resolve
from conformance.engine.placing import Materialized, PlacedCall, place
from conformance.ops import OpSpec


@dataclass
class CaseOutcome:
    """What a case measured; `failure` is the first failed check, if any."""

    samples: int = 0
    stats: ErrorStats = field(default_factory=ErrorStats)
    failure: Mismatch | None = None
    failed_sample: str | None = None
    failed_call: PlacedCall | None = None  # for standalone repro scripts
    skip_reason: str | None = None


def _invoke(fn, m: Materialized) -> Outcome:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Outcome(fn(*m.args, **m.kwargs))
    except Exception as exc:  # errors are compared, not raised
        return Outcome(exc=exc.with_traceback(None))


def run_case(
    backend: Backend,
    overload: str,
    spec: OpSpec,
    calls: list[Call],
    layout: str,
    path: str,
    route: bool = True,
) -> CaseOutcome:
    """Run every sample of the case; stop at the first failed check.

    path 'fallback' with route=True routes a natively registered overload through
    cpu_fallback with the backend's switch; route=False: the overload has no kernel and
    reaches the fallback by itself."""
    op = resolve(overload)
    outcome = CaseOutcome()
    placed_calls = _placed(calls, layout, op._schema, spec.written_args)
    if not placed_calls:
        outcome.skip_reason = (
            f"no sample of {overload} has an input that the '{layout}' layout applies to"
            if calls
            else f"no samples for {overload} with this dtype"
        )
        return outcome
    watch = memory.MemoryWatch(backend)
    routed = overload if path == "fallback" and route else None
    for placed in placed_calls:
        failure = None
        try:
            _run_sample(
                backend, op, overload, spec, placed, routed, path == "fallback", outcome.stats
            )
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
        outcome.samples += 1
    if outcome.failure is None:
        try:
            watch.check_leaks(overload)
        except Mismatch as failure:
            outcome.failure = failure
    return outcome


def _placed(calls: list[Call], layout: str, schema, written: tuple[str, ...]) -> list[PlacedCall]:
    out = []
    has_out = any(
        a.alias_info is not None and a.alias_info.is_write and a.kwarg_only
        for a in schema.arguments
    )
    for call in calls:
        p = place(call, layout, schema, written=written)
        if p is not None:
            out.append(p)
        if has_out and layout == "contiguous":
            resized = place(call, layout, schema, resize_out=True, written=written)
            if resized is not None:
                out.append(resized)
    return out


def _run_sample(
    backend: Backend,
    op,
    overload: str,
    spec: OpSpec,
    placed: PlacedCall,
    route: str | None,
    via_fallback: bool,
    stats: ErrorStats,
) -> None:
    cpu = placed.materialize("cpu")
    dev = placed.materialize(backend.device)
    written_before = [
        (view._version, view.data_ptr()) for leaf, _, view in dev.bases if leaf.written
    ]
    cpu_before = [(view._version, view.data_ptr()) for leaf, _, view in cpu.bases if leaf.written]

    reference = spec.reference or op
    expected = _invoke(reference, cpu)
    count_before = backend.fallback_count(overload)
    with backend.routed_through_fallback(route):
        actual = _invoke(op, dev)
    checks.run_checks(
        checks.Sample(
            backend=backend,
            op=op,
            overload=overload,
            spec=spec,
            placed=placed,
            cpu=cpu,
            dev=dev,
            expected=expected,
            actual=actual,
            stats=stats,
            via_fallback=via_fallback,
            fallback_count_before=count_before,
            written_before=written_before,
            cpu_written_before=cpu_before,
        )
    )
