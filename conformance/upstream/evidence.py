"""The run's records -> the upstream test configuration (what `render.py` writes).

Every entry carries its evidence: the finding (harness/found.py: the one reading of what a run
found, shared with the baseline manifest), the manifest entry that expected it, or the passing
cases it was measured on. Cases whose statuses differ between the given runs (flaky) excuse
nothing, as in the baseline.

- op_allowlist: the OpInfos of the overloads the backend registers (its own kernels); applied
  only on request (`--allowlist`): torch 2.13-2.15 raise "An empty op_list was passed to @ops"
  for every @ops list it empties (test_ops.py's python_ref_db lists), so a test file stops
  collecting.
- op_overrides: a strict `unittest.expectedFailure` on a modelled upstream test (models.py)
  for an OpInfo and dtype it runs, where it sees a failure the run measured (seeing.py: the
  call it makes, on the inputs it uses, beyond its tolerance); `unittest.skip("crash: ...")` on
  every test of the OpInfo and dtype for a crash or hang of a call its test makes; a measured
  `toleranceOverride` where passing cases (judged against float64: the device as close as CPU)
  differ from CPU by more than the tolerance of a test comparing the OpInfo's own inputs with
  CPU or numpy, at most `TOLERANCE_CAP` times it, never over a failure. A failure no modelled
  test sees is listed, with why, as not excused.
- test_exclusions: the test classes the device profile says the device cannot run.
- capabilities (torch 2.15+): from what the run measured; a capability it did not measure is
  declared absent (a test that needs it skips rather than runs unjudged).
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ConformanceUsageError
from conformance.harness.baseline_contexts import contexts_of
from conformance.harness.found import expected_crash, expected_status, found, kernel_lacked
from conformance.record import OP_FAMILY, CaseId, CaseRecord, Status, torch_minor
from conformance.upstream.api import TestConfigApi, api_for
from conformance.upstream.models import DEFAULT_TESTS, UpstreamTest, dtypes_of, op_list, resolved
from conformance.upstream.opinfos import OpInfoView, input_ops, is_functional
from conformance.upstream.reach import unmeasured
from conformance.upstream.seeing import Seer

__all__ = (
    "EXCLUSIONS",
    "TOLERANCE_CAP",
    "Override",
    "UpstreamConfig",
    "build",
    "measured_capabilities",
    "missing_input_ops",
)

#: a measured tolerance is never more than this many times the test's
TOLERANCE_CAP = 4.0
#: a device profile fact -> the PyTorch test classes that need what the fact says is missing:
#: `compiler` is "aot_eager" where a run with --modes compile found no Inductor backend for the
#: device (None: not asked)
EXCLUSIONS = (
    (
        "compiler",
        lambda value: value == "aot_eager",
        "TestInductorOpInfo",
        "no Inductor backend is registered for the device (profile: compiler aot_eager)",
    ),
)
#: capability (torch 2.15's Capability constants) -> the overloads whose passing cases show it
CAPABILITY_OPS = {
    "attention.flash_attention": ("_scaled_dot_product_flash_attention",),
    "attention.mem_efficient_attention": ("_scaled_dot_product_efficient_attention",),
}
#: the failures that excuse: the run's own (found), and those a manifest expected
OWN_FAILURES = frozenset({Status.FAILED, Status.CRASHED, Status.HUNG})


@dataclass
class Override:
    """One decorator of one OpInfo: xfail | skip | tolerance, for some dtypes."""

    op: str
    kind: str
    reason: str
    test: UpstreamTest | None = None  # xfail, tolerance: the test it applies to (skip: all)
    dtypes: set[str] = field(default_factory=set)
    evidence: set[str] = field(default_factory=set)  # finding ids, repro lines, case ids
    atol: float = 0.0
    rtol: float = 0.0


@dataclass
class UpstreamConfig:
    """What the generated module holds, with its provenance."""

    api: TestConfigApi
    meta: Mapping[str, Any]
    source: str
    tests: tuple[UpstreamTest, ...]
    allowlist: list[str]
    overrides: list[Override]
    exclusions: dict[str, tuple[str, str]]  # class -> ("*", why)
    capabilities: dict[str, tuple[bool, str]]
    measured_dtypes: list[str]
    not_excused: list[str]  # what the evidence could not excuse: those tests will fail
    prerequisites: list[str] = field(default_factory=list)  # input kernels the device lacks
    unmeasured: list[str] = field(default_factory=list)  # OpInfos, dtypes the run did not measure
    partial: list[str] = field(default_factory=list)  # why the results were partial (accepted)
    apply_allowlist: bool = False
    bypass_device_restrictions: bool = False
    generated: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    )

    def counts(self) -> dict[str, int]:
        kinds = {"xfail": 0, "skip": 0, "tolerance": 0}
        for o in self.overrides:
            kinds[o.kind] += len(o.dtypes)
        return {"allowlist": len(self.allowlist), **kinds, "exclusions": len(self.exclusions)}

    def describe(self) -> str:
        c = self.counts()
        allow = "applied" if self.apply_allowlist else "written, not applied (--allowlist)"
        return (
            f"{c['allowlist']} OpInfos in the allowlist ({allow}); {c['xfail']} expected "
            f"failure(s), {c['skip']} skip(s), {c['tolerance']} measured tolerance(s) (OpInfo x "
            f"dtype x test); {c['exclusions']} excluded class(es); {len(self.not_excused)} "
            "line(s) not excused"
        )


def _failures(records: Sequence[CaseRecord]) -> Iterable[tuple[CaseRecord, str, str, str]]:
    """(record, status, evidence, case) of every failure the run found or a manifest expected:
    the run's own failures, crashes and hangs (not cases that never ran, the harness's errors,
    or cases blocked by a broken foundation: those name the foundation's finding); a manifest's
    expected failures but flaky ones, its declared missing kernels, its crash skips."""
    for item in found(records):
        if item.record.status not in OWN_FAILURES:
            continue
        label = f"{item.finding.id}: {item.finding.title.split('; not declared:')[0]}"
        repro = item.record.repro
        evidence = f"{label}; repro: {repro}" if repro else label
        if item.status == "crash" and item.record.culprit and not item.culprit:
            evidence += f" (its culprit {item.record.culprit} is not an op case: not excused)"
        yield item.record, item.status, evidence, item.culprit or item.record.id
    for record in records:
        status = expected_status(record)
        if record.status == Status.UNSUPPORTED and record.extra.get("unsupported_dtype"):
            note = f"the manifest declares {record.dtype} unsupported (unsupported_dtypes)"
            yield record, "unsupported", note, record.id
            continue
        if status is None or record.category in ("flaky", "harness"):
            continue
        if status == "skip":  # a manifest's skip excuses only a crash it names
            if not expected_crash(record):
                continue
            status = "crash"
        why = record.extra.get("expected_reason") or record.first_line
        yield record, status, f"expected by {record.expected_by}: {why}", record.id


class _Builder:
    def __init__(
        self,
        view: OpInfoView,
        tests: tuple[UpstreamTest, ...],
        records: Sequence[CaseRecord],
        registered: Collection[str],
    ) -> None:
        self.view = view
        self.tests = tests
        self.seer = Seer(view, {str(CaseId.parse(r.id)): r for r in records}, registered)
        self.overrides: dict[tuple, Override] = {}
        self.failing: set[tuple[str, str]] = set()  # (OpInfo, dtype) with a failure
        self.not_excused: list[str] = []

    def add(
        self, op: str, kind: str, reason: str, dtype: str, evidence: str, t: UpstreamTest | None
    ) -> Override:
        key = (op, kind, reason, t)
        o = self.overrides.setdefault(key, Override(op, kind, reason, t))
        o.dtypes.add(dtype)
        o.evidence.add(evidence)
        if kind != "tolerance":
            self.failing.add((op, dtype))
        return o

    def running(self, op: str, dtype: str) -> list[UpstreamTest]:
        """The modelled tests that run OpInfo `op` in `dtype`."""
        return [
            t
            for t in self.tests
            if op in op_list(t.ops) and dtype in dtypes_of(t, self.view.db[op])
        ]

    def tested_dtypes(self, op: str) -> set[str]:
        """The dtypes the modelled tests run OpInfo `op` in."""
        return {
            d for t in self.tests if op in op_list(t.ops) for d in dtypes_of(t, self.view.db[op])
        }

    def failure(self, record: CaseRecord, status: str, evidence: str, case_text: str) -> None:
        try:
            case = CaseId.parse(case_text)
        except ValueError:
            return
        if status in ("crash", "skip"):
            self._crash(record, status, evidence, case, culprit=case_text != record.id)
            return
        seen, why = False, {}
        for op in self.view.of_overload(case.overload):
            for t in self.running(op, case.dtype):
                sight = self.seer.sees(t, op, record, case)
                if sight.seen:
                    seen = True
                    self.add(op, "xfail", _reason(record, status, case.overload), case.dtype,
                             evidence, t)  # fmt: skip
                else:
                    why.setdefault(sight.why, []).append(t.test)
        if not seen:
            because = "; ".join(f"{', '.join(sorted(set(ts)))}: {w}" for w, ts in why.items())
            self.not_excused.append(
                f"{case}: no upstream test sees it ({because or 'no modelled test runs it'})"
            )

    def _crash(
        self, record: CaseRecord, status: str, evidence: str, case: CaseId, culprit: bool
    ) -> None:
        """A crash or hang: every test of each OpInfo that may make the call is skipped (its
        forward call, or the in-place, out= and backward calls the suite captured of it): a
        crash takes PyTorch's test process down. `culprit`: `case` corrupted memory that
        `record`'s case crashed on."""
        what = "crash" if status == "crash" else "hang"
        head = "corrupted memory a later case crashed on" if culprit else record.first_line[:160]
        ops = [
            op
            for op in self.view.of_overload(case.overload)
            if case.dtype in self.view.cpu_dtypes(op)
            and self.view.touches(op, case.overload, case.dtype)
        ]
        for op in ops:
            self.add(op, "skip", f"{what}: {head}", case.dtype, evidence, None)
        if not ops:
            self.not_excused.append(f"{case}: a {what} no OpInfo test is known to reach")

    def tolerance(self, record: CaseRecord) -> None:
        """A measured tolerance from a passing case, for the tests that compare the OpInfo's own
        inputs with CPU or numpy."""
        try:
            case = CaseId.parse(record.id)
        except ValueError:
            return
        if not (self.view.spoken_for(case) and is_functional(case.overload)):
            return
        if case.dtype not in ("float16", "bfloat16", "float32", "float64"):
            return
        abs_err, rel_err = record.max_abs_err or 0.0, record.max_rel_err or 0.0
        for op in self.view.of_overload(case.overload):
            if (op, case.dtype) in self.failing or not self.view.reaches(
                op, case.overload, case.dtype
            ):
                continue
            for t in self.running(op, case.dtype):
                if t.inputs == "generated" or t.compares == "self":
                    continue
                rtol, atol = t.tolerance_for(case.dtype)
                if abs_err <= atol or rel_err <= rtol:
                    continue  # within the test's tolerance (atol + rtol * |expected| holds)
                if abs_err > TOLERANCE_CAP * atol and rel_err > TOLERANCE_CAP * rtol:
                    self.not_excused.append(
                        f"{op} {case.dtype} {t.name}: measured max abs {abs_err:.3g} / rel "
                        f"{rel_err:.3g} needs more than {TOLERANCE_CAP:g}x its tolerance"
                    )
                    continue
                o = self.add(op, "tolerance", "measured", case.dtype, str(case), t)
                if abs_err <= TOLERANCE_CAP * atol:
                    o.atol = max(o.atol, abs_err)
                else:
                    o.rtol = max(o.rtol, rel_err)


def _reason(record: CaseRecord, status: str, overload: str) -> str:
    """What an expected failure expects, in a few words."""
    if status == "unsupported" or record.check == "unsupported":
        return f"the device has no kernel for {kernel_lacked(record) or overload}"
    how = "expected by the run's manifest" if record.expected_by else "a finding of the run"
    return f"{record.check} differ(s) from CPU in {overload} ({how})"


def measured_capabilities(
    records: Sequence[CaseRecord], unsupported: set[str]
) -> dict[str, tuple[bool, str]]:
    """torch 2.15's capabilities, as the run measured them (what it did not measure: absent)."""
    passed = {r.op_name for r in records if r.status == Status.PASSED}
    bf16 = "bfloat16" not in unsupported and any(
        r.dtype == "bfloat16" and r.status == Status.PASSED for r in records
    )
    caps: dict[str, tuple[bool, str]] = {
        "dtype.bf16": (bf16, "bfloat16 cases passed" if bf16 else "no bfloat16 case passed"),
        "dtype.fp8": (False, "not measured by the run (no float8 cases): declared absent"),
    }
    for cap, ops in CAPABILITY_OPS.items():
        ok = any(o in passed for o in ops)
        caps[cap] = (ok, f"{'/'.join(ops)} {'passed' if ok else 'not judged passing'}")
    return caps


def missing_input_ops(meta: Mapping[str, Any], dtypes: Iterable[str]) -> list[str]:
    """What PyTorch's tests need to build their inputs on the device and the backend lacks (no
    kernel registered, no fallback): one line per kernel with the dtypes it blocks."""
    coverage = meta.get("coverage") or {}
    if coverage.get("has_fallback"):
        return []
    registered = set(coverage.get("registered") or ())
    blocked: dict[str, list[str]] = {}
    for dtype in sorted(dtypes):
        for op in input_ops(dtype):
            if op not in registered:
                blocked.setdefault(op, []).append(dtype)
    return [
        f"{op}: make_tensor calls it on the device for {', '.join(ds)}; the backend has no kernel "
        "for it and no fallback, so every OpInfo test of those dtypes fails before calling its op"
        for op, ds in sorted(blocked.items())
    ]


def _check_runs(metas: Sequence[Mapping[str, Any]]) -> TestConfigApi:
    """The API of the runs' torch; one-line errors for what the generator cannot serve."""
    import torch

    versions = {torch_minor(str(m.get("torch", ""))) for m in metas}
    backends = {str(m.get("backend", "")) for m in metas}
    if len(versions) > 1 or len(backends) > 1:
        raise ConformanceUsageError(
            f"results of several torch versions or backends ({', '.join(sorted(versions))}; "
            f"{', '.join(sorted(backends))}): write one configuration per torch version and "
            "backend (one results folder at a time, in that version's environment)"
        )
    version = str(metas[0].get("torch") or "")
    api = api_for(version)
    if torch_minor(torch.__version__) != api.minor:
        raise ConformanceUsageError(
            f"the results are of torch {version} but torch {torch.__version__} is installed: "
            f"run the generator where torch {api.minor} is (its op_db names the OpInfos), e.g. "
            "in that version's nox session"
        )
    key = ((metas[0].get("profile") or {}).get("dispatch_key") or {}).get("value")
    if key not in (None, "PrivateUse1"):
        raise ConformanceUsageError(
            f"the device '{metas[0].get('device')}' has dispatch key {key}: set_test_configs is "
            "written for PrivateUse1TestBase (an out-of-tree PrivateUse1 backend)"
        )
    if not all((m.get("coverage") or {}).get("registered") for m in metas):
        raise ConformanceUsageError(
            "the results have no coverage (run.json `coverage.registered`: a run that stopped "
            "before its cases, or an older suite): measure again, then generate"
        )
    return api


def build(
    runs: Sequence[tuple[Mapping[str, Any], Iterable[CaseRecord]]],
    *,
    source: str,
    tests: Sequence[UpstreamTest] = DEFAULT_TESTS,
    cache_dir: str | None = None,
    apply_allowlist: bool = False,
    bypass_device_restrictions: bool = False,
    partial: Sequence[str] = (),
    include_unmeasured: bool = False,
) -> UpstreamConfig:
    """The configuration that `runs` (one torch minor, one backend) measured."""
    runs = [(meta, list(records)) for meta, records in runs]
    if not runs:
        raise ConformanceUsageError("no results: give the results folder of a run")
    metas = [m for m, _ in runs]
    api = _check_runs(metas)
    contexts = contexts_of(runs)
    records = [
        r
        for ctx in contexts
        for case, r in ctx.records.items()
        if case not in ctx.differing and r.family == OP_FAMILY
    ]
    registered = set().union(*((m.get("coverage") or {}).get("registered") or () for m in metas))
    tests = tuple(resolved(t) for t in tests)
    builder = _Builder(OpInfoView(cache_dir), tests, records, registered)
    for ctx in contexts:
        if ctx.differing:
            builder.not_excused.append(
                f"torch {ctx.minor} ({ctx.allocator}): {len(ctx.differing)} case(s) with "
                "different statuses in different runs (flaky): they excuse nothing"
            )
    for record, status, evidence, case in _failures(records):
        builder.failure(record, status, evidence, case)
    for r in records:
        if r.status == Status.PASSED:
            builder.tolerance(r)
    opinfos: dict[str, list[str]] = {}
    for overload in sorted(registered):
        for op in builder.view.of_overload(overload):
            opinfos.setdefault(op, []).append(overload)
    measured, unmeasured_lines = unmeasured(opinfos, records, builder.tested_dtypes)
    unsupported = {r.dtype for r in records if r.extra.get("unsupported_dtype")}
    profile = metas[0].get("profile") or {}
    return UpstreamConfig(
        api=api,
        meta=metas[0],
        source=source,
        tests=tuple(tests),
        allowlist=sorted(opinfos if include_unmeasured else measured),
        overrides=sorted(
            builder.overrides.values(),
            key=lambda o: (o.op, o.kind, o.reason, o.test.name if o.test else ""),
        ),
        exclusions={
            cls: ("*", why)
            for fact, lacks, cls, why in EXCLUSIONS
            if lacks(
                ((profile.get(fact) or {}) if isinstance(profile, Mapping) else {}).get("value")
            )
        },
        capabilities=measured_capabilities(records, unsupported) if api.capabilities else {},
        measured_dtypes=sorted({r.dtype for r in records}),
        not_excused=sorted(set(builder.not_excused)),
        prerequisites=missing_input_ops(metas[0], {r.dtype for r in records}),
        apply_allowlist=apply_allowlist,
        bypass_device_restrictions=bypass_device_restrictions,
        unmeasured=unmeasured_lines,
        partial=list(partial),
    )
