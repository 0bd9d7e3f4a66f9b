"""The state of one conformance run: backend, case list, expectations, results."""

from __future__ import annotations

import fnmatch
import os
import shlex
from typing import Any

import pytest
import torch

from conformance.engine import discovery, samples
from conformance.engine.backend import Backend, load_backend
from conformance.engine.foundations import ORDER as FOUNDATION_ORDER
from conformance.engine.foundations import Foundations, Probe
from conformance.engine.layout_names import LAYOUT_HELP
from conformance.engine.runner import CaseOutcome, run_case
from conformance.engine.transfer import RELIES_ON
from conformance.errors import ConformanceUsageError
from conformance.harness.expectations import Entry, Manifest, default_manifest_paths, load_manifest
from conformance.harness.options import Options
from conformance.ops import spec_for
from conformance.record import CaseId, CaseRecord, Status

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


RECORD_KEY = pytest.StashKey[CaseRecord]()  # per item: what its case measured


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Suite:
    """Created lazily when conformance cases are collected (other pytest runs never pay)."""

    def __init__(self, options: Options, cache_dir: str | None, worker: str) -> None:
        self.options = options
        self.cache_dir = cache_dir
        self.worker = worker
        self.backend: Backend = load_backend(options.backend, options.device)
        self.allocator = self.backend.allocator_mode()
        self.manifest = self._manifest()
        self.registered = discovery.registered_overloads()
        self._calls: dict[tuple[str, torch.dtype], list] = {}
        self.overloads = self.selected_overloads()  # validates --ops early
        self.fallback_only = self.selected_fallback_overloads()
        self.foundations = Foundations(self.backend.device, set(self.registered))

    def _manifest(self) -> Manifest:
        paths = self.options.expectations
        if paths is None:
            paths = default_manifest_paths(REPO_ROOT, self.options.backend, torch.__version__)
        return load_manifest(paths)

    # ---- collection -------------------------------------------------------------------------
    def selected_overloads(self) -> list[str]:
        wanted = self.options.ops
        if not wanted:
            return self.registered
        chosen = [o for o in self.registered if any(fnmatch.fnmatchcase(o, w) for w in wanted)]
        unknown = [w for w in wanted if not any(fnmatch.fnmatchcase(o, w) for o in self.registered)]
        if unknown:
            hint = ", ".join(self.registered[:12]) + (", ..." if len(self.registered) > 12 else "")
            raise ConformanceUsageError(
                f"--ops: {', '.join(unknown)} matches no overload registered by "
                f"{self.options.backend} (registered: {hint})"
            )
        return chosen

    def selected_fallback_overloads(self) -> list[str]:
        """--fallback-ops: overloads reached only through the boxed fallback."""
        wanted = self.options.fallback_ops
        if not wanted:
            return []
        if not discovery.has_backend_fallback():
            raise ConformanceUsageError(
                f"--fallback-ops: {self.options.backend} registered no boxed fallback "
                "for PrivateUse1, so no op reaches cpu_fallback"
            )
        from conformance.engine.samples.opinfo import opinfo_index

        reachable = discovery.fallback_overloads(set(opinfo_index(self.cache_dir)))
        if wanted == ["all"]:
            return reachable
        chosen = [o for o in reachable if any(fnmatch.fnmatchcase(o, w) for w in wanted)]
        unknown = [w for w in wanted if not any(fnmatch.fnmatchcase(o, w) for o in reachable)]
        if unknown:
            raise ConformanceUsageError(
                f"--fallback-ops: {', '.join(unknown)} matches no overload that reaches the "
                f"backend fallback and has OpInfo samples (e.g. {', '.join(reachable[:6])})"
            )
        return chosen

    def cases(self) -> list[CaseId]:
        """Every case of the run; the foundations (foundations.ORDER) first, most primitive
        first, so that the first failing case of a run names the op that is actually wrong."""
        paths = [p for p in self.options.paths if p == "native" or self.backend.can_route_fallback]
        out = []
        rank = {op: i for i, op in enumerate(FOUNDATION_ORDER)}
        for overload in sorted(self.overloads, key=lambda o: rank.get(o, len(rank))):
            spec = spec_for(overload)
            dtypes = [d for d in self.options.dtypes if spec.dtypes is None or d in spec.dtypes]
            for dtype in dtypes:
                for layout in self.options.layouts:
                    if spec.layouts is not None and layout not in spec.layouts:
                        continue
                    for path in paths:
                        if path == "fallback" and not self.backend.fallback_routable(overload):
                            continue
                        out.append(CaseId(overload, dtype_name(dtype), layout, path))
        if "fallback" in self.options.paths:
            for overload in self.fallback_only:
                spec = spec_for(overload)
                for dtype in self.options.dtypes:
                    for layout in self.options.layouts:
                        if spec.layouts is None or layout in spec.layouts:
                            out.append(CaseId(overload, dtype_name(dtype), layout, "fallback"))
        return out

    def calls(self, overload: str, dtype: torch.dtype) -> list:
        """Samples of (overload, dtype), loaded once per process (cases share them)."""
        key = (overload, dtype)
        if key not in self._calls:
            self._calls[key] = samples.calls_for(overload, dtype, self.cache_dir)
        return self._calls[key]

    def stale_expectations(self) -> list[Entry]:
        """Manifest entries that match no case of the full matrix (only judged when the run
        was not narrowed by --ops/--dtypes/--layouts/--paths)."""
        from conformance.harness.options import DEFAULT_DTYPES, PATHS, parse_dtypes

        o = self.options
        narrowed = (
            o.ops
            or o.dtypes != parse_dtypes(DEFAULT_DTYPES)
            or len(o.layouts) < len(LAYOUT_HELP)
            or len(o.paths) < len(PATHS)
        )
        if narrowed:
            return []
        ids = [str(case) for case in self.cases()]

        def judged(entry: Entry) -> bool:  # without --fallback-ops, fallback-only ops are not run
            op = entry.pattern.split("-")[0]
            return bool(o.fallback_ops) or any(fnmatch.fnmatchcase(r, op) for r in self.registered)

        return [
            e
            for e in self.manifest.entries
            if (not e.allocator or e.allocator == self.allocator)
            and judged(e)
            and not any(fnmatch.fnmatchcase(i, e.pattern) for i in ids)
        ]

    def scenario_blocker(self) -> Probe | None:
        """The broken foundation every scenario depends on (allocation, as_strided, the copies
        that move results to CPU), if any: probed in float32, the scenarios' dtype."""
        needed = ("empty.memory_format", "empty_strided", "_copy_from", "as_strided")
        return next((p for p in self.foundations.broken(torch.float32) if p.op in needed), None)

    def relies_on(self) -> dict[str, str]:
        """What the verdicts rely on besides the op under test (run header, run.json)."""
        below = hasattr(torch._C, "_AutoDispatchBelowADInplaceOrView")
        b = self.backend
        memory = [h for h in ("check_memory", "live_blocks") if b.hook(h) is not None]
        return {
            "reading and placing": RELIES_ON,
            "identity": "torch._C._AutoDispatchBelowADInplaceOrView (the kernel's own return)"
            if below
            else "nothing: this torch lacks _AutoDispatchBelowADInplaceOrView, check skipped",
            "error": "error classes from the message (engine/errorclass.py); layout "
            + (
                "preconditions compared (--strict-errors)"
                if self.options.strict_errors
                else "preconditions of CPU's kernel: sample not applicable"
            ),
            "random ops": "torch.manual_seed before each side: equal draws, else properties "
            "(Kolmogorov-Smirnov)",
            "blame": "foundation probes (engine/foundations.py) and torch.profiler for the ops a "
            "failed sample reaches",
            "memory": ", ".join(f"backend.{h}" for h in memory) or "nothing (no backend hooks)",
        }

    def expectation(self, case: CaseId) -> Entry | None:
        return self.manifest.match(str(case), self.allocator)

    # ---- running ----------------------------------------------------------------------------
    def run(self, case: CaseId, item: pytest.Item) -> None:
        """Run the case; leave its result record on `item`; raise pytest outcomes."""
        nodeid = item.nodeid
        spec = spec_for(case.overload)
        calls = self.calls(case.overload, getattr(torch, case.dtype))
        route = case.path == "fallback" and case.overload in self.registered
        outcome = run_case(
            self.backend,
            case.overload,
            spec,
            calls,
            case.layout,
            case.path,
            route=route,
            strict_errors=self.options.strict_errors,
            foundations=self.foundations,
        )
        expected = self.expectation(case)
        xfail = expected is not None and expected.status == "xfail"
        record = self._record(case, outcome, nodeid)
        item.stash[RECORD_KEY] = record
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
            pytest.fail(message, pytrace=False)
        if xfail:
            assert expected is not None
            record.status = Status.XPASSED
            pytest.fail(
                f"unexpected pass: the case {case} passes now; remove this entry "
                f"({expected.pattern!r}) from {expected.source}",
                pytrace=False,
            )
        if outcome.unsupported:
            record.status = Status.UNSUPPORTED
            pytest.skip(f"unsupported: {outcome.unsupported}")
        if outcome.torch_bugs:
            record.status = Status.TORCH_BUG

    def _write_repro(self, case: CaseId, outcome: CaseOutcome, routed: bool) -> str:
        from conformance.engine.repro import write_repro

        failure = outcome.failure
        return write_repro(
            self.options.repro_dir,
            str(case),
            outcome.failed_call,
            backend=self.options.backend,
            headline=f"[{failure.check}] {failure.message}",
            routed=routed,
            env_prefix=self._env_prefix(backend_only=True),
        )

    def _env_prefix(self, backend_only: bool = False) -> str:
        """The environment a repro needs: the backend's variables (and the suite's)."""
        prefixes = (self.options.backend.upper() + "_",)
        if not backend_only:
            prefixes += ("CONFORMANCE_",)
        skip = ("CONFORMANCE_RESULTS", "CONFORMANCE_REPRO_DIR")
        env = {k: v for k, v in os.environ.items() if k.startswith(prefixes) and k not in skip}
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))

    def repro(self, nodeid: str) -> str:
        prefix = self._env_prefix()
        backend = "" if self.options.backend == "echo_npu" else f" --backend {self.options.backend}"
        cmd = f"pytest {shlex.quote(nodeid)}{backend} --results none"
        preload = os.environ.get("LD_PRELOAD", "")
        checkers = [
            flag
            for lib, flag in (("libasan", "--asan"), ("malloc_debug", "--malloc-check"))
            if lib in preload
        ]
        if checkers:  # the run was under a preloaded checker: so is the repro
            cmd = f"python -m conformance.tools.launch {' '.join(checkers)} -- {cmd}"
        return f"{prefix} {cmd}".strip()

    def failure_message(self, case: CaseId, outcome: CaseOutcome, nodeid: str) -> str:
        failure = outcome.failure
        if failure is not None:
            lines = [f"[{failure.check}] {failure.message}"]
        else:
            lines = [f"[unsupported] {outcome.unsupported}"]
        if outcome.blocked_by is not None:
            probe = outcome.blocked_by
            lines = [
                f"[blocked] blocked by {probe.case}: {probe.what}: {probe.message}",
                f"  own failure: {lines[0]}",
            ]
        if outcome.failed_sample:
            lines.append(
                f"  sample: {outcome.failed_sample} (layout {case.layout}, path "
                f"{case.path}, allocator {self.allocator})"
            )
        lines.append(f"  repro: {self.repro(nodeid)}")
        return "\n".join(lines)

    def _record(self, case: CaseId, outcome: CaseOutcome, nodeid: str) -> CaseRecord:
        """The case's result record; its status is set from pytest's outcome when logged
        (or here, for the statuses pytest has no outcome for: see session._DECIDED)."""
        failure = outcome.failure
        if failure is not None or outcome.unsupported:
            message: str | None = self.failure_message(case, outcome, nodeid)
        elif outcome.torch_bugs:
            more = len(outcome.torch_bugs) - 1
            message = f"[torch-bug] {outcome.torch_bugs[0]}" + (
                f" (+{more} more samples)" if more else ""
            )
        elif outcome.errors_only:
            message = (
                f"error parity only: cpu raised on all {outcome.samples} samples and the device "
                "raised errors of the same class"
            )
        else:
            message = outcome.skip_reason
        record = self.new_record(
            case,
            Status.PASSED,
            nodeid,
            check=failure.check if failure else ("error" if outcome.unsupported else None),
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
        if outcome.errors_only:
            record.extra["errors_only"] = True
        return record

    def new_record(self, case: CaseId, status: Status, nodeid: str, **values: Any) -> CaseRecord:
        """A record of this run (torch, backend, allocator, repro filled in) for `case`."""
        return CaseRecord.for_case(
            case,
            status,
            torch=str(torch.__version__),
            backend=self.options.backend,
            allocator=self.allocator,
            repro=self.repro(nodeid),
            **values,
        )
