"""The run's records -> the upstream test configuration (what `render.py` writes).

Every entry carries its evidence: the finding (harness/found.py: the one reading of what a run
found, shared with the baseline manifest) or the passing cases it was measured on.

- op_allowlist: the OpInfos of the overloads the backend registers (its own kernels).
- op_overrides: a strict `unittest.expectedFailure` on the named test templates for an OpInfo
  and dtype whose call a failing case made (a finding, a kernel the device lacks, a failure a
  manifest expected); `unittest.skip("crash: ...")` on every test of the OpInfo and dtype for a
  crash or hang; a measured `toleranceOverride` where passing cases (judged against float64:
  the device as close as CPU) differ from CPU by more than assertEqual's default tolerance, at
  most `TOLERANCE_CAP` times that default and never for an OpInfo and dtype with a failure.
- test_exclusions: the test classes the device profile says the device cannot run
  (`EXCLUSIONS`).
- capabilities (torch 2.15+): from what the run measured; a capability it did not measure is
  declared absent (a test that needs it skips rather than runs unjudged).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ConformanceUsageError
from conformance.harness.found import expected_status, found, kernel_lacked
from conformance.record import OP_FAMILY, CaseId, CaseRecord, Status
from conformance.upstream.api import TestConfigApi, api_for, minor_of
from conformance.upstream.opinfos import (
    COMPARED,
    OpInfoView,
    default_tolerance,
    input_ops,
    is_functional,
)

__all__ = (
    "DEFAULT_TESTS",
    "EXCLUSIONS",
    "TOLERANCE_CAP",
    "Override",
    "UpstreamConfig",
    "build",
    "measured_capabilities",
)

#: the OpInfo test templates an expected failure names: the tests that run an OpInfo's inputs on
#: the device and compare with CPU, which is what a case of the run judged
DEFAULT_TESTS = (("TestCommon", "test_compare_cpu"),)
#: a measured tolerance is never more than this many times assertEqual's default
TOLERANCE_CAP = 4.0
#: a device profile fact -> the PyTorch test classes that need what the fact says is missing
EXCLUSIONS = (
    (
        "compiler",
        lambda value: not value,
        "TestInductorOpInfo",
        "no Inductor backend is registered for the device (profile: compiler)",
    ),
)
#: capability (torch 2.15's Capability constants) -> the overloads whose passing cases show it
CAPABILITY_OPS = {
    "attention.flash_attention": ("_scaled_dot_product_flash_attention",),
    "attention.mem_efficient_attention": ("_scaled_dot_product_efficient_attention",),
}


@dataclass
class Override:
    """One decorator of one OpInfo: xfail | skip | tolerance, for some dtypes."""

    op: str
    kind: str
    reason: str
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
    tests: tuple[tuple[str, str], ...]
    allowlist: list[str]
    overrides: list[Override]
    exclusions: dict[str, tuple[str, str]]  # class -> ("*", why)
    capabilities: dict[str, tuple[bool, str]]
    measured_dtypes: list[str]
    not_excused: list[str]  # tolerances the cap refused: those tests will fail
    prerequisites: list[str] = field(default_factory=list)  # input kernels the device lacks
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
        return (
            f"{c['allowlist']} OpInfos allowed, {c['xfail']} expected failure(s), {c['skip']} "
            f"skip(s), {c['tolerance']} measured tolerance(s), {c['exclusions']} excluded "
            f"class(es) (OpInfo x dtype)"
        )


def _failures(records: Sequence[CaseRecord]) -> list[tuple[CaseRecord, str, str, str]]:
    """(record, status, evidence, case) of every failure the run found or a manifest expected."""
    out = []
    for item in found(records):
        rep = item.finding.representative
        label = f"{item.finding.id}: {item.finding.title.split('; not declared:')[0]}"
        evidence = f"{label}; repro: {rep.repro}" if rep.repro else label
        out.append((item.record, item.status, evidence, item.culprit or item.record.id))
    for record in records:
        status = expected_status(record)
        if status is not None and not record.extra.get("unsupported_dtype"):
            why = record.extra.get("expected_reason") or record.first_line
            out.append((record, status, f"expected by {record.expected_by}: {why}", record.id))
    return out


def _reason(record: CaseRecord, status: str, overload: str) -> str:
    """What an expected failure expects, in a few words."""
    if status == "unsupported" or record.check == "unsupported":
        return f"the device has no kernel for {kernel_lacked(record) or overload}"
    how = "expected by the run's manifest" if record.expected_by else "a finding of the run"
    return f"{record.check or record.status} differ(s) from CPU in {overload} ({how})"


class _Builder:
    def __init__(self, view: OpInfoView, tests: tuple[tuple[str, str], ...]) -> None:
        self.view = view
        self.tests = tests
        self.overrides: dict[tuple[str, str, str], Override] = {}
        self.failing: set[tuple[str, str]] = set()  # (OpInfo, dtype) with a failure

    def add(self, op: str, kind: str, reason: str, dtype: str, evidence: str) -> Override:
        o = self.overrides.setdefault((op, kind, reason), Override(op, kind, reason))
        o.dtypes.add(dtype)
        o.evidence.add(evidence)
        if kind != "tolerance":
            self.failing.add((op, dtype))
        return o

    def failure(self, record: CaseRecord, status: str, evidence: str, case_text: str) -> None:
        try:
            case = CaseId.parse(case_text)
        except ValueError:
            return
        for op in self.view.of_overload(case.overload):
            if case.dtype not in self.view.cpu_dtypes(op):
                continue
            if status in ("crash", "skip"):  # whatever variant or layout: it takes tests down
                what = {"crash": "crash", "hung": "hang"}.get(
                    status if status == "crash" else str(record.status), "skipped by its manifest"
                )
                self.add(op, "skip", f"{what}: {record.first_line[:160]}", case.dtype, evidence)
                continue
            if not (self.view.spoken_for(case) and is_functional(case.overload)):
                continue
            if str(record.check or "unsupported") not in COMPARED:
                continue
            if self.view.reaches(op, case.overload, case.dtype, case.values):
                self.add(op, "xfail", _reason(record, status, case.overload), case.dtype, evidence)

    def tolerance(self, record: CaseRecord) -> str | None:
        """A measured tolerance from a passing case; the refusal when the cap forbids it."""
        try:
            case = CaseId.parse(record.id)
        except ValueError:
            return None
        abs_err, rel_err = record.max_abs_err or 0.0, record.max_rel_err or 0.0
        if not (self.view.spoken_for(case) and is_functional(case.overload)):
            return None
        if case.dtype not in ("float16", "bfloat16", "float32", "float64"):
            return None
        rtol, atol = default_tolerance(case.dtype)
        if abs_err <= atol or rel_err <= rtol:
            return None  # within assertEqual's default (atol + rtol * |expected| holds)
        refused = None
        for op in self.view.of_overload(case.overload):
            if (op, case.dtype) in self.failing or case.dtype not in self.view.cpu_dtypes(op):
                continue
            if not self.view.reaches(op, case.overload, case.dtype, case.values):
                continue
            if abs_err > TOLERANCE_CAP * atol and rel_err > TOLERANCE_CAP * rtol:
                refused = (
                    f"{op} {case.dtype}: measured max abs {abs_err:.3g} / rel {rel_err:.3g} "
                    f"needs more than {TOLERANCE_CAP:g}x the default tolerance: not excused"
                )
                continue
            o = self.add(op, "tolerance", f"measured: {case.dtype}", case.dtype, str(case))
            if abs_err <= TOLERANCE_CAP * atol:
                o.atol = max(o.atol, abs_err)
            else:
                o.rtol = max(o.rtol, rel_err)
        return refused


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


def build(
    runs: Sequence[tuple[Mapping[str, Any], Iterable[CaseRecord]]],
    *,
    source: str,
    tests: Sequence[tuple[str, str]] = DEFAULT_TESTS,
    cache_dir: str | None = None,
) -> UpstreamConfig:
    """The configuration that `runs` (one torch minor, one backend) measured."""
    import torch

    if not runs:
        raise ConformanceUsageError("no results: give the results folder of a run")
    metas = [m for m, _ in runs]
    versions = {minor_of(str(m.get("torch", ""))) for m in metas}
    backends = {str(m.get("backend", "")) for m in metas}
    if len(versions) > 1 or len(backends) > 1:
        raise ConformanceUsageError(
            f"results of several torch versions or backends ({', '.join(sorted(versions))}; "
            f"{', '.join(sorted(backends))}): write one configuration per torch version and "
            "backend (one results folder at a time, in that version's environment)"
        )
    version = str(metas[0].get("torch", ""))
    api = api_for(version)
    if minor_of(torch.__version__) != api.minor:
        raise ConformanceUsageError(
            f"the results are of torch {version} but torch {torch.__version__} is installed: "
            f"run the generator where torch {api.minor} is (its op_db names the OpInfos), e.g. "
            f"in that version's nox session"
        )
    key = ((metas[0].get("profile") or {}).get("dispatch_key") or {}).get("value")
    if key not in (None, "PrivateUse1"):
        raise ConformanceUsageError(
            f"the device '{metas[0].get('device')}' has dispatch key {key}: set_test_configs is "
            "written for PrivateUse1TestBase (an out-of-tree PrivateUse1 backend)"
        )
    records = [r for _, rs in runs for r in rs if r.family == OP_FAMILY]
    view = OpInfoView(cache_dir)
    builder = _Builder(view, tuple(tests))
    for record, status, evidence, case in _failures(records):
        builder.failure(record, status, evidence, case)
    unsupported = {r.dtype for r in records if r.extra.get("unsupported_dtype")}
    registered = set()
    for meta in metas:
        registered |= set((meta.get("coverage") or {}).get("registered") or ())
    allowlist = sorted({op for o in registered for op in view.of_overload(o)})
    for op in allowlist:
        for dtype in sorted(unsupported & view.cpu_dtypes(op)):
            builder.add(op, "xfail", f"unsupported dtype: {dtype}", dtype,
                        f"the run declared {dtype} unsupported (unsupported_dtypes)")  # fmt: skip
    not_excused = [
        refused for r in records if r.status == Status.PASSED and (refused := builder.tolerance(r))
    ]
    profile = metas[0].get("profile") or {}
    exclusions = {
        cls: ("*", why)
        for fact, lacks, cls, why in EXCLUSIONS
        if fact in profile and lacks((profile[fact] or {}).get("value"))
    }
    return UpstreamConfig(
        api=api,
        meta=metas[0],
        source=source,
        tests=tuple(tests),
        allowlist=allowlist,
        overrides=sorted(builder.overrides.values(), key=lambda o: (o.op, o.kind, o.reason)),
        exclusions=exclusions,
        capabilities=measured_capabilities(records, unsupported) if api.capabilities else {},
        measured_dtypes=sorted({r.dtype for r in records}),
        not_excused=sorted(set(not_excused)),
        prerequisites=missing_input_ops(metas[0], {r.dtype for r in records}),
    )
