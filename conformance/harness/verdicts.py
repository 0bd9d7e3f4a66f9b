"""Running one case: the engine's outcome turned into a verdict (a pytest outcome and the case's
`CaseRecord`), with the manifest's expectations applied, blame added after the case's own
verdict is noted in the run folder, the failure message and its repro line."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pytest
import torch

from conformance.engine.backend import Backend
from conformance.engine.compare import Mismatch
from conformance.engine.foundations import Foundations
from conformance.engine.modes import mode_of
from conformance.engine.placing import PlacedCall
from conformance.engine.runner import CaseOutcome, blame
from conformance.harness.casework import CaseWork, CpuLacksDtype, SampleError
from conformance.harness.expectations import Expectations
from conformance.harness.nodes import case_of, leave_verdict, left_verdict
from conformance.harness.options import Options
from conformance.harness.repro_lines import ReproLines
from conformance.harness.rundir import RunDir
from conformance.harness.sampling import RunSamples
from conformance.ops import spec_for
from conformance.record import CaseId, CaseRecord, Status
from conformance.samples import arguments


def undeclared(unsupported: str) -> str:
    """The failure message of a case the device lacks where CPU computes, undeclared."""
    return (
        f"{unsupported}; not declared: add the kernel, or declare it in the expectations "
        'manifest (an entry with status = "unsupported", or unsupported_dtypes = [...] for a '
        "whole dtype; python -m conformance.measure.baseline RESULTS writes them)"
    )


class CaseVerdicts:
    """Runs the cases of one run (collaborators: the run's options, backend, samples, the
    manifest's expectations, foundations, repro lines and run folder)."""

    def __init__(
        self,
        options: Options,
        backend: Backend,
        samples: RunSamples,
        registered: Collection[str],
        expectations: Expectations,
        foundations: Foundations,
        repro_lines: ReproLines,
        run_dir: RunDir | None,
    ) -> None:
        self.options = options
        self.backend = backend
        self.samples = samples
        self.registered = set(registered)
        self.expectations = expectations
        self.foundations = foundations
        self.repro_lines = repro_lines
        self.run_dir = run_dir
        self.allocator = expectations.allocator
        self.work = CaseWork(
            backend,
            samples,
            self.registered,
            options.strict_errors,
            expectations.manifest.policy,
            smallest_failing=bool(options.repro_dir),
        )

    def run(self, case: CaseId, item: pytest.Item) -> None:
        """Run the case; leave its result record on `item`; raise pytest outcomes."""
        nodeid = item.nodeid
        try:
            outcome = self.work.outcome(case)
        except CpuLacksDtype as exc:  # no CPU reference to judge against: not applicable
            reason = (
                f"not applicable: building the samples needs a cpu kernel this dtype lacks ({exc})"
            )
            leave_verdict(item, self.new_record(case, Status.SKIPPED, nodeid, message=reason))
            pytest.skip(reason)
        except SampleError as exc:  # the suite's own sample sources broke: not a verdict
            message = (
                f"[harness] building the samples of {case.overload} ({case.dtype}) failed: "
                f"{exc}\n  repro: {self.repro_lines.repro(nodeid)}"
            )
            record = self.new_record(case, Status.ERROR, nodeid, check="harness", message=message)
            leave_verdict(item, record)
            pytest.fail(message, pytrace=False)
        route = case.path == "fallback" and case.overload in self.registered
        expected = self.expectations.expectation(case)
        declared = self.expectations.declared_unsupported(case, expected)
        if outcome.unsupported and outcome.failure is None and not declared:
            # the device lacks what CPU has (a result, or on an error-input sample CPU's error:
            # error parity), and the manifest does not say so: a verdict, never a skip
            text = outcome.unsupported
            if not outcome.unsupported_cpu_computes:
                text += " (error parity: the device's 'not implemented' is not cpu's error)"
            outcome.failure = Mismatch("unsupported", undeclared(text))
        xfail = expected is not None and expected.status == "xfail"
        failure = outcome.failure
        head = f"[{failure.check}] {failure.message}" if failure is not None else ""
        if xfail and failure is not None and not expected.expects(failure.check, head):
            # another failure than the entry expects (a second bug, a missing kernel): never
            # excused by an entry pinned to other checks or other failures
            xfail = False
            failure.message += expected.not_expected_note(str(case))
        if outcome.failure is not None or outcome.unsupported:
            self._diagnose(case, outcome, nodeid, xfail)
        record = self._record(case, outcome, nodeid)
        if expected is not None and expected.status in ("xfail", "unsupported"):
            expected.mark(record)
        elif declared and outcome.unsupported:
            record.extra.update(unsupported_dtype=declared, category="unsupported")
        leave_verdict(item, record)
        if outcome.skip_reason:
            pytest.skip(outcome.skip_reason)
        if outcome.failure is not None or (outcome.unsupported and xfail):
            message = self.failure_message(case, outcome, nodeid)
            if self.options.repro_dir and outcome.failed_call is not None:
                script = self._write_repro(case, outcome, route)
                message += f"\n  repro script: python {script}"
                record.message = message
            if xfail:
                assert expected is not None
                pytest.xfail(f"{expected.describe()} -- {message.splitlines()[0]}")
            if outcome.blocked_by is not None:
                record.status = Status.BLOCKED
            elif outcome.failure is not None and outcome.failure.check == "harness":
                record.status = Status.ERROR  # the suite broke, not a verdict on the backend
            pytest.fail(message, pytrace=False)
        strict = expected is not None and expected.status == "unsupported" and outcome.samples
        if xfail or (strict and not outcome.unsupported):
            assert expected is not None
            record.status = Status.XPASSED
            pattern = expected.matching(str(case))
            one = len(expected.patterns) == 1
            what = "this entry" if one else "this entry's pattern"
            whole = "" if one else " (the whole entry once none of its cases fails)"
            record.message = (
                f"unexpected pass: the case {case} passes now; remove {what} ({pattern!r}) "
                f"from {expected.source}{whole}"
            )
            pytest.fail(record.message, pytrace=False)
        if outcome.unsupported:
            record.status = Status.UNSUPPORTED
            pytest.skip(f"unsupported: {outcome.unsupported}")
        if outcome.torch_bugs:
            record.status = Status.TORCH_BUG

    def _diagnose(self, case: CaseId, outcome: CaseOutcome, nodeid: str, xfail: bool) -> None:
        """Blame a failed case on a broken foundation. The case's own verdict is noted in the
        run folder first: if the diagnostics crash this process, the verdict stands (the
        runner's owner reads the note); if they raise, it stands too, with a note why."""
        if self.run_dir is not None:
            own = self._record(case, outcome, nodeid)
            failed = outcome.failure is not None
            harness = failed and outcome.failure.check == "harness"
            own.status = (
                Status.XFAILED
                if xfail
                else Status.ERROR
                if harness
                else Status.FAILED
                if failed
                else Status.UNSUPPORTED
            )
            self.run_dir.write_verdict(nodeid, own, own.message or "")
        try:
            found = blame(outcome, self.foundations, case.layout)
            outcome.blocked_by, outcome.related = found.blocked_by, found.related
        except Exception as exc:  # noqa: BLE001 - blame annotates, it never replaces a verdict
            outcome.blame_error = f"{type(exc).__name__}: {str(exc).strip()[:200]}"

    def _write_repro(self, case: CaseId, outcome: CaseOutcome, routed: bool) -> str:
        from conformance.engine.repro import write_repro

        failure = outcome.repro_failure or outcome.failure
        compiled = mode_of(case.values).compiled
        return write_repro(
            self.options.repro_dir,
            str(case),
            outcome.repro_call or outcome.failed_call,
            backend=self.backend.module_name,
            headline=f"[{failure.check}] {failure.message}",
            routed=routed,
            env_prefix=self.repro_lines.env_prefix(compiled),
            spec=spec_for(case.overload),
            has_check_memory=self.backend.hook("check_memory") is not None,
            compiler=self.backend.compiler if compiled else None,
            device_type=self.backend.device_type,
            register=self.backend.register,
        )

    def failure_message(self, case: CaseId, outcome: CaseOutcome, nodeid: str) -> str:
        failure = outcome.failure
        if failure is not None:
            lines = [f"[{failure.check}] {failure.message}"]
        else:
            lines = [f"[unsupported] {outcome.unsupported}"]
        if outcome.blocked_by is not None:
            lines = [f"[blocked] {outcome.blocked_by.headline()}", f"  own failure: {lines[0]}"]
        elif outcome.related is not None:
            lines.append(
                f"  might be related: {outcome.related.describe()} is broken (not blocking: "
                "this sample shows no use of that part)"
            )
        if outcome.failed_sample:
            lines.append(
                f"  sample: {outcome.failed_sample} (layout {case.layout}, path "
                f"{case.path}, allocator {self.allocator})"
            )
        if case.values == "arguments" and outcome.failed_call is not None:
            lines.append(f"  {self._derived_classes(case, outcome.failed_call)}")
        lines.append(f"  repro: {self.repro_lines.repro(nodeid)}")
        return "\n".join(lines)

    def _derived_classes(self, case: CaseId, placed: PlacedCall) -> str:
        """The argument classes a failed -arguments sample reaches and the ordinary samples do
        not: what the case adds (samples/arguments.py)."""
        account = self.samples.arguments(case.overload, getattr(torch, case.dtype))
        found = arguments.reached(placed.call, case.overload)
        new = sorted(c for c in found if account.get(c) != "ordinary")
        return (
            f"argument value class{'es' if len(new) > 1 else ''} the ordinary samples miss: "
            f"{', '.join(new)}"
            if new
            else "argument values as in the ordinary samples"
        )

    def _record(self, case: CaseId, outcome: CaseOutcome, nodeid: str) -> CaseRecord:
        """The case's result record; its status is set from pytest's outcome when logged
        (or here, for the statuses pytest has no outcome for: see case_reports._DECIDED)."""
        failure = outcome.failure
        if failure is not None or outcome.unsupported:
            message: str | None = self.failure_message(case, outcome, nodeid)
        elif outcome.torch_bugs:
            more = len(outcome.torch_bugs) - 1
            message = f"[torch-bug] {outcome.torch_bugs[0]}" + (
                f" (+{more} more samples)" if more else ""
            )
        elif outcome.errors_only:
            refused = any(
                n.startswith("message quality: the device stopped") for n in outcome.notes
            )
            message = (
                f"error parity only: cpu raised on all {outcome.samples} samples and the device "
                + (
                    "raised errors of the same class or stopped at an internal check stating "
                    "the same cause (see the note)"
                    if refused
                    else "raised errors of the same class"
                )
            )
        else:
            message = outcome.skip_reason
        record = self.new_record(
            case,
            Status.PASSED,
            nodeid,
            check=failure.check if failure else ("unsupported" if outcome.unsupported else None),
            max_abs_err=outcome.stats.max_abs if outcome.samples else None,
            max_rel_err=outcome.stats.max_rel if outcome.samples else None,
            samples=outcome.samples,
            message=message,
        )
        if outcome.blocked_by is not None:
            record.blocked_by = outcome.blocked_by.case
            record.extra["blocked_by_message"] = (
                f"{outcome.blocked_by.what}: {outcome.blocked_by.message}"
            )
            record.extra["blocked_by_probe"] = outcome.blocked_by.message
        elif outcome.related is not None:
            record.extra["related_foundation"] = outcome.related.case
        if outcome.errors_only:
            record.extra["errors_only"] = True
        if outcome.notes:  # e.g. a device error that says nothing of what is wrong
            record.extra["notes"] = list(dict.fromkeys(outcome.notes))[:3]
            record.message = record.message or f"[note] {outcome.notes[0]}"
        if outcome.evidence is not None:  # what the case's mode records (sync, compile)
            record.extra.update(outcome.evidence.as_record())
        if self.backend.lazy is not None and outcome.samples:
            # the device's own evidence (its runtime's aten:: counters), not our routing
            record.extra["ran"] = "fallback" if case.op in outcome.fell_back else "native"
            if outcome.fell_back:
                record.extra["fell_back"] = sorted(outcome.fell_back)
        if outcome.compile_seconds is not None:  # the backend's own time, not the case's
            record.extra["compile_s"] = round(outcome.compile_seconds, 4)
        if outcome.execute_seconds is not None:
            record.extra["execute_s"] = round(outcome.execute_seconds, 4)
        if outcome.first_call_seconds is not None:
            record.extra["first_call_s"] = round(outcome.first_call_seconds, 4)
        if outcome.blame_error:
            record.extra["blame"] = f"blame could not be computed: {outcome.blame_error}"
        return record

    def new_record(self, case: CaseId, status: Status, nodeid: str, **values: Any) -> CaseRecord:
        """A record of this run (torch, backend, allocator, repro filled in) for `case`."""
        return CaseRecord.for_case(
            case,
            status,
            torch=str(torch.__version__),
            backend=self.backend.module_name,
            allocator=self.allocator,
            repro=self.repro_lines.repro(nodeid),
            **values,
        )


def reported_record(
    verdicts: CaseVerdicts, item: pytest.Item, report: pytest.TestReport
) -> CaseRecord:
    """The record a case's setup/call report carries: the one the case left on its item, or,
    when the suite broke before deciding, an `error` one, or, when a manifest entry skipped it
    before it ran, a `skipped` one naming the entry."""
    case = case_of(item)
    assert case is not None
    record = left_verdict(item)
    if record is not None:
        return record
    if report.failed:  # the suite itself broke before deciding
        message = _first_line(report.longrepr)
        return verdicts.new_record(
            case, Status.ERROR, item.nodeid, check="harness", message=message
        )
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else None
    record = verdicts.new_record(case, Status.SKIPPED, item.nodeid, message=reason)
    entry = verdicts.expectations.expectation(case)
    if entry is not None:
        entry.mark(record)
    return record


def _first_line(longrepr: Any) -> str:
    """The exception's first line: pytest's crash line where the report has one (any --tb
    style: harness/failure_reprs.py shows a case's natively), else the first `E ` line."""
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    if crash and crash.strip():
        return crash.strip().splitlines()[0][:500]
    text = str(longrepr or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    return (errors[0][1:].strip() if errors else lines[-1] if lines else "")[:500]
