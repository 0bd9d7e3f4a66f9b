"""The state of one conformance run: backend, case list, expectations, results."""

from __future__ import annotations

import fnmatch
import os
import shlex
from typing import Any

import pytest
import torch

from conformance.engine import discovery, samples, workloads
from conformance.engine.backend import Backend, load_backend
from conformance.engine.layout_names import LAYOUT_HELP
from conformance.engine.runner import CaseOutcome, run_case
from conformance.engine.samples import values
from conformance.errors import ConformanceUsageError
from conformance.harness.expectations import Entry, Manifest, default_manifest_paths, load_manifest
from conformance.harness.options import ORDINARY, Options
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
        self._calls: dict[tuple[str, torch.dtype, str], list] = {}
        self.excluded = workloads.excluded()  # model-derived overloads left out, and why
        self.overloads = self.selected_overloads()  # validates --ops early
        self.fallback_only = self.selected_fallback_overloads()
        self._fallback_only_set = frozenset(self.fallback_only)

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
        """--fallback-ops: overloads reached only through the boxed fallback. By default (no
        --ops) the model-derived set: what the workloads of engine/workloads.py reach through
        this backend's fallback, less matrices/workloads/excluded.toml."""
        wanted = self.options.fallback_ops
        if wanted is None:
            wanted = [] if self.options.ops else ["models"]
        if not wanted or wanted == ["none"]:
            return []
        if not discovery.has_backend_fallback():
            if self.options.fallback_ops is None:
                return []  # the default: nothing reaches a fallback that does not exist
            raise ConformanceUsageError(
                f"--fallback-ops: {self.options.backend} registered no boxed fallback "
                "for PrivateUse1, so no op reaches cpu_fallback"
            )
        if wanted == ["models"]:
            return [o for o in workloads.model_fallback_overloads() if o not in self.excluded]
        from conformance.engine.samples.opinfo import opinfo_index

        reachable = discovery.fallback_overloads(set(opinfo_index(self.cache_dir)))
        if wanted == ["all"]:
            return reachable
        chosen = [o for o in reachable if any(fnmatch.fnmatchcase(o, w) for w in wanted)]
        unknown = [w for w in wanted if not any(fnmatch.fnmatchcase(o, w) for o in reachable)]
        if unknown:
            raise ConformanceUsageError(
                f"--fallback-ops: {', '.join(unknown)} matches no overload that reaches the "
                f"backend fallback and has OpInfo samples (e.g. {', '.join(reachable[:6])}); "
                "or pass 'models', 'all' or 'none'"
            )
        return chosen

    def cases(self) -> list[CaseId]:
        """Every case id, built from names alone (no samples: collection stays cheap)."""
        paths = [p for p in self.options.paths if p == "native" or self.backend.can_route_fallback]
        out = []
        for overload in self.overloads:
            routes = [p for p in paths if p == "native" or self.backend.fallback_routable(overload)]
            out += self._cases_of(overload, self._dtypes(overload, False), routes)
        if "fallback" in self.options.paths:
            for overload in self.fallback_only:
                out += self._cases_of(overload, self._dtypes(overload, True), ["fallback"])
        return out

    def _dtypes(self, overload: str, fallback_only: bool) -> list[torch.dtype]:
        """The requested dtypes the op's spec allows; for fallback-only overloads also only
        those its OpInfos support on CPU (others would only be skipped)."""
        spec = spec_for(overload)
        dtypes = [d for d in self.options.dtypes if spec.dtypes is None or d in spec.dtypes]
        if fallback_only and spec.samples is None:
            from conformance.engine.samples.opinfo import supported_dtypes

            supported = supported_dtypes(overload, self.cache_dir)
            if supported is not None:
                dtypes = [d for d in dtypes if dtype_name(d) in supported]
        return dtypes

    def _cases_of(self, overload: str, dtypes: list[torch.dtype], paths: list[str]) -> list:
        spec = spec_for(overload)
        layouts = [lo for lo in self.options.layouts if spec.layouts is None or lo in spec.layouts]
        value_sets = [
            v
            for v in self.options.values
            if v != ORDINARY and (spec.value_sets is None or v in spec.value_sets)
        ]
        if not spec.check_values or "contiguous" not in layouts:
            value_sets = []
        out = []
        for dtype in dtypes:
            name = dtype_name(dtype)
            if ORDINARY in self.options.values:
                out += [CaseId(overload, name, lo, p) for lo in layouts for p in paths]
            for v in value_sets:
                if values.applies(overload, dtype, v):
                    out += [CaseId(overload, name, "contiguous", p, v) for p in paths]
        return out

    def calls(self, overload: str, dtype: torch.dtype, value_set: str = "") -> list:
        """Samples of (overload, dtype, value set), loaded once per process (cases share them)."""
        key = (overload, dtype, value_set)
        if key not in self._calls:
            limit = (
                samples.MAX_FALLBACK_SAMPLES
                if overload in self._fallback_only_set
                else samples.MAX_OPINFO_SAMPLES
            )
            self._calls[key] = samples.calls_for(
                overload, dtype, self.cache_dir, value_set, limit=limit
            )
        return self._calls[key]

    def untested_overloads(self) -> dict[str, str]:
        """{registered overload: why it has no case that compares} (empty: all are tested).
        Builds samples (from the disk cache once warm)."""
        out = {}
        for overload in self.registered:
            spec = spec_for(overload)
            dtypes = [d for d in self.options.dtypes if spec.dtypes is None or d in spec.dtypes]
            if not dtypes:
                out[overload] = "its op spec allows none of the requested dtypes"
            elif not any(self.calls(overload, d) for d in dtypes):
                out[overload] = (
                    "no samples: no OpInfo reaches it, no op spec in conformance/ops/ and no "
                    "sibling overload to derive them from"
                )
        return out

    def coverage_lines(self) -> list[str]:
        """Header lines: registered overloads with samples, the fallback-only set."""
        untested = self.untested_overloads()
        n = len(self.registered)
        tested = f"{n - len(untested)} of {n} registered overloads tested"
        if untested:
            tested += "; untested: " + "; ".join(f"{o} ({why})" for o, why in untested.items())
        lines = [f"conformance: {tested}"]
        if self.fallback_only:
            how = self.options.fallback_ops or ["models"]
            line = (
                f"conformance: {len(self.fallback_only)} fallback-only overloads "
                f"({','.join(how)}) on the fallback path"
            )
            if how == ["models"] and self.excluded:
                line += f"; left out (matrices/workloads/excluded.toml): {', '.join(self.excluded)}"
            lines.append(line)
        return lines

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
        return [
            e
            for e in self.manifest.entries
            if (not e.allocator or e.allocator == self.allocator)
            and not any(fnmatch.fnmatchcase(i, e.pattern) for i in ids)
        ]

    def expectation(self, case: CaseId) -> Entry | None:
        return self.manifest.match(str(case), self.allocator)

    # ---- running ----------------------------------------------------------------------------
    def run(self, case: CaseId, item: pytest.Item) -> None:
        """Run the case; leave its result record on `item`; raise pytest outcomes."""
        nodeid = item.nodeid
        spec = spec_for(case.overload)
        calls = self.calls(case.overload, getattr(torch, case.dtype), case.values)
        route = case.path == "fallback" and case.overload in self.registered
        outcome = run_case(
            self.backend, case.overload, spec, calls, case.layout, case.path, route=route
        )
        expected = self.expectation(case)
        record = self._record(case, outcome, nodeid)
        item.stash[RECORD_KEY] = record
        if outcome.skip_reason:
            pytest.skip(outcome.skip_reason)
        if outcome.failure is not None:
            message = self.failure_message(case, outcome, nodeid)
            if self.options.repro_dir and outcome.failed_call is not None:
                script = self._write_repro(case, outcome, route)
                message += f"\n  repro script: python {script}"
                record.message = message
            if expected is not None and expected.status == "xfail":
                pytest.xfail(f"{expected.describe()} -- {message.splitlines()[0]}")
            pytest.fail(message, pytrace=False)
        if expected is not None and expected.status == "xfail":
            record.status = Status.XPASSED
            pytest.fail(
                f"unexpected pass: the case {case} passes now; remove this entry "
                f"({expected.pattern!r}) from {expected.source}",
                pytrace=False,
            )

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
        assert failure is not None
        lines = [f"[{failure.check}] {failure.message}"]
        if outcome.failed_sample:
            lines.append(
                f"  sample: {outcome.failed_sample} (layout {case.layout}, path "
                f"{case.path}, allocator {self.allocator})"
            )
        lines.append(f"  repro: {self.repro(nodeid)}")
        return "\n".join(lines)

    def _record(self, case: CaseId, outcome: CaseOutcome, nodeid: str) -> CaseRecord:
        """The case's result record; its status is set from pytest's outcome when logged."""
        failure = outcome.failure
        return self.new_record(
            case,
            Status.PASSED,
            nodeid,
            check=failure.check if failure else None,
            max_abs_err=outcome.stats.max_abs if outcome.samples else None,
            max_rel_err=outcome.stats.max_rel if outcome.samples else None,
            samples=outcome.samples,
            message=self.failure_message(case, outcome, nodeid) if failure else outcome.skip_reason,
        )

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
