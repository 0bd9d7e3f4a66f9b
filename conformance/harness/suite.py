"""The state of one conformance run: backend, case list, expectations, results."""

from __future__ import annotations

import fnmatch
import functools
import os
import shlex
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
import torch

from conformance.engine import coverage, discovery, gradients, samples, workloads
from conformance.engine.backend import Backend, load_backend
from conformance.engine.compare import Mismatch
from conformance.engine.foundations import ORDER as FOUNDATION_ORDER
from conformance.engine.foundations import Blame, Foundations, Probe
from conformance.engine.layout_names import LAYOUT_HELP
from conformance.engine.runner import CaseOutcome, blame, run_case
from conformance.engine.samples import values
from conformance.engine.samples.summary import SampleSummary
from conformance.engine.transfer import RELIES_ON
from conformance.errors import ConformanceUsageError
from conformance.harness.expectations import (
    SCENARIO,
    Entry,
    Manifest,
    default_manifest_paths,
    load_manifest,
    scenario_key,
)
from conformance.harness.keyword import keyword_filter
from conformance.harness.modes import ModeAccount
from conformance.harness.options import MODES, ORDINARY, Options
from conformance.harness.rundir import RunDir
from conformance.ops import spec_for
from conformance.record import TEST_NAME, CaseId, CaseRecord, Status, missing_kernel
from conformance.sharding import Partition, digest

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
CASES_FILE = "test_conformance.py"  # the module of the generated cases


RECORD_KEY = pytest.StashKey[CaseRecord]()  # per item: what its case measured
PROBE_TIMEOUT = 30.0  # seconds one foundation probe may take in its own process
CALLS_KEPT = 64  # (overload, dtype, value set) whose samples one process keeps in memory


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def undeclared(unsupported: str) -> str:
    """The failure message of a case the device lacks where CPU computes, undeclared."""
    return (
        f"{unsupported}; not declared: add the kernel, or declare it in the expectations "
        'manifest (an entry with status = "unsupported", or unsupported_dtypes = [...] for a '
        "whole dtype; python -m conformance.tools.baseline RESULTS writes them)"
    )


class Suite:
    """Created lazily when conformance cases are collected (other pytest runs never pay)."""

    def __init__(
        self,
        options: Options,
        cache_dir: str | None,
        worker: str,
        *,
        invocation_dir: str = ".",
        with_coverage: bool = True,
        keyword: str | None = None,
    ) -> None:
        self.options = options
        # pytest -k as a case-id predicate (None: keep all): the plugin builds only the cases it
        # keeps, and the coverage account is computed for them
        self.keep = keyword_filter(keyword)
        self.keyword = keyword or ""
        self.cache_dir = cache_dir
        self.worker = worker
        self.invocation_dir = invocation_dir
        # never touches the device: usability is probed where forking cannot suffer from it
        self.backend: Backend = load_backend(options.backend, options.device)
        self.backend_name = self.backend.module_name
        self.allocator = self.backend.allocator_mode()
        self.manifest = self._manifest()
        self.registered = discovery.registered_overloads()
        self.schemaless = discovery.schemaless_registrations()
        self.has_fallback = discovery.has_backend_fallback()
        # the samples of the last CALLS_KEPT (overload, dtype, value set): cases of one overload
        # run one after another, and keeping every overload's would grow with the backend
        self._calls: OrderedDict[tuple[str, torch.dtype, str], list] = OrderedDict()
        # what the sample sources hold, remembered on disk (start-up builds no samples)
        self.summary = SampleSummary(cache_dir)
        # which overloads get -grad / -inference cases
        self.modes = ModeAccount(self.calls, self._remember)
        self.excluded = workloads.excluded()  # model-derived overloads left out, and why
        self.overloads = self.selected_overloads()  # validates --ops early
        self.fallback_only = self.selected_fallback_overloads()
        self._fallback_only_set = frozenset(self.fallback_only)
        self.grad_only = self.selected_grad_only_overloads()
        # a spawned case runner collects every case (the parent chose which ones run)
        self.coverage: coverage.Coverage | None = None
        self.coverage = self._coverage() if with_coverage else None
        self.summary.save()
        # --shard: a spawned runner collects every case (its parent chose which ones run; its
        # case list, without the coverage account, is not the parent's anyway)
        self.shard = options.shard if with_coverage else None
        self.partition = self._partition() if with_coverage else None
        self._collected: list[CaseId] | None = None
        self._shard_account: dict[str, Any] | None = None  # set with the collected cases
        # where processes of this run share what they found (set by the session; None: alone)
        self.run_dir: RunDir | None = None
        self.foundations = Foundations(
            self.backend.device,
            set(self.registered),
            prober=self._probe_foundations,
            has_fallback=self.has_fallback,
        )

    def _probe_foundations(self, dtype: torch.dtype) -> list[Probe]:
        """The failed foundation probes of `dtype`: run once per run, in a process of their own
        (engine/probing.py), shared by every worker and runner through the run folder."""
        from dataclasses import asdict

        from conformance.engine.probing import probe_isolated

        name = dtype_name(dtype)

        def compute() -> list[dict]:
            probes = probe_isolated(self.options.backend, self.options.device, name, PROBE_TIMEOUT)
            return [asdict(p) for p in probes]

        found = self.run_dir.shared(f"foundation-{name}.json", compute) if self.run_dir else None
        return [Probe(**p) for p in (found if found is not None else compute())]

    def _partition(self) -> Partition | None:
        """--shard's partition, weighted by --shard-durations when given."""
        options = self.options
        if options.shard is None:
            if options.shard_durations:
                raise ConformanceUsageError(
                    "--shard-durations balances shards: give --shard K/N too"
                )
            return None
        if not options.shard_durations:
            return Partition(options.shard.count)
        same = options.results and os.path.realpath(options.results) == os.path.realpath(
            options.shard_durations
        )
        if same:
            raise ConformanceUsageError(
                f"--shard-durations {options.shard_durations}: that is this run's --results "
                "folder, which the run clears at its start; give an earlier run's folder (a copy)"
            )
        from conformance.report.load import load_durations

        try:
            durations = load_durations(options.shard_durations)
        except ConformanceUsageError as exc:
            raise ConformanceUsageError(f"--shard-durations: {exc}") from None
        return Partition(options.shard.count, durations, options.shard_durations)

    def _manifest(self) -> Manifest:
        paths = self.options.expectations
        if paths is None:
            paths = default_manifest_paths(REPO_ROOT, self.backend_name, torch.__version__)
        return load_manifest(paths)

    def _coverage(self) -> coverage.Coverage:
        reachable: list[str] = []
        if self.has_fallback:
            reachable = discovery.fallback_overloads(samples.known_bases(self.cache_dir))
        return coverage.compute(
            self.registered,
            self._kept_by_keyword(self.overloads, False),
            self.options.dtypes,
            lambda overload: self._dtypes(overload, overload in self._fallback_only_set),
            self.sample_count,
            self._no_sample_reason,
            schemaless=self.schemaless,
            has_fallback=self.has_fallback,
            fallback_only=reachable,
            fallback_selected=self._kept_by_keyword(self.fallback_only, True),
            fallback_set=",".join(self.options.fallback_ops or ["models"]),
            excluded=list(self.excluded),
            default_kernels=self._model_default_kernels(),
            models=workloads.model_overloads(),
        )

    def _model_default_kernels(self) -> list[str]:
        """Model-derived overloads this backend runs through torch's composite kernels and that
        this run does not test as ops (the coverage account names them)."""
        if self._fallback_wanted() != ["models"]:
            return []
        chosen = set(self.fallback_only)
        return [o for o in workloads.model_default_kernel_overloads() if o not in chosen]

    def _unregistered_path(self, overload: str) -> str:
        """The path of an overload this backend registered no kernel for: "fallback" when the
        boxed fallback serves it, "native" when torch's default (composite) kernel runs on the
        device (nothing is rerouted)."""
        kind = discovery.how_reached(overload)
        return "native" if kind == discovery.DEFAULT_KERNEL else "fallback"

    def _kept_by_keyword(self, overloads: list[str], fallback_only: bool) -> list[str]:
        """The overloads with a case that -k keeps (all without -k): the coverage account
        builds samples, so a run narrowed by -k only pays for what it runs."""
        keep = self.keep
        if keep is None:
            return list(overloads)
        return [
            o
            for o in overloads
            if any(
                keep(str(c))
                for c in self._cases_of(
                    o,
                    self._dtypes(o, fallback_only),
                    [self._unregistered_path(o)] if fallback_only else list(self.options.paths),
                    probe=False,
                )
            )
        ]

    def _no_sample_reason(self, overload: str) -> str:
        from conformance.engine.samples.opinfo import base_name, opinfo_index

        spec = spec_for(overload)
        if spec.samples is None and not (
            spec.opinfo_names or base_name(overload) in opinfo_index(self.cache_dir)
        ):
            return "no samples (no OpInfo entry and no op spec in conformance/ops)"
        return "no samples (no OpInfo sample reaches this overload; add an op spec)"

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
                f"{self.backend_name} (registered: {hint})"
            )
        return chosen

    def _fallback_wanted(self) -> list[str]:
        """--fallback-ops as given, or its default: the model-derived set, none with --ops."""
        wanted = self.options.fallback_ops
        if wanted is None:
            return [] if self.options.ops else ["models"]
        return wanted

    def selected_fallback_overloads(self) -> list[str]:
        """--fallback-ops: overloads reached only through the boxed fallback. By default (no
        --ops) the model-derived set: what the workloads of engine/workloads.py reach through
        this backend's fallback, less conformance/workloads/excluded.toml."""
        wanted = self._fallback_wanted()
        if not wanted or wanted == ["none"]:
            return []
        if not self.has_fallback:
            if self.options.fallback_ops is None:
                return []  # the default: nothing reaches a fallback that does not exist
            raise ConformanceUsageError(
                f"--fallback-ops: {self.backend_name} registered no boxed fallback "
                "for PrivateUse1, so no op reaches cpu_fallback"
            )
        if wanted == ["models"]:
            return [o for o in workloads.model_fallback_overloads() if o not in self.excluded]
        known = samples.known_bases(self.cache_dir)
        reachable = discovery.fallback_overloads(known)
        if wanted == ["all"]:
            return reachable
        # a glob also reaches overloads torch's composite kernels serve on this backend
        # (`_foreach_*`: tested as ops on the device, the "native" path)
        reachable = discovery.fallback_overloads(
            known, kinds=(discovery.FALLBACK, discovery.DEFAULT_KERNEL)
        )
        chosen = [o for o in reachable if any(fnmatch.fnmatchcase(o, w) for w in wanted)]
        unknown = [w for w in wanted if not any(fnmatch.fnmatchcase(o, w) for o in reachable)]
        if unknown:
            raise ConformanceUsageError(
                f"--fallback-ops: {', '.join(unknown)} matches no overload that reaches the "
                f"backend fallback and has OpInfo samples (e.g. {', '.join(reachable[:6])}); "
                "or pass 'models', 'all' or 'none'"
            )
        return chosen

    def selected_grad_only_overloads(self) -> list[str]:
        """Overloads with -grad cases only: with the model-derived default (and with 'all', a
        superset of it), what the workloads call that this backend runs as a decomposition
        (engine/workloads.py)."""
        if self.options.ops or "grad" not in self.options.modes:
            return []
        if self._fallback_wanted() not in (["models"], ["all"]):
            return []
        known = set(self.registered) | self._fallback_only_set | set(self.excluded)
        return [
            o
            for o in workloads.model_composite_overloads()
            if o not in known and self.modes.grad_reason(o, probe=False) is None
        ]

    def _has_samples(self, overload: str, dtype: torch.dtype) -> bool:
        return self.coverage is None or not self.coverage.missing(overload, dtype_name(dtype))

    def cases(self) -> list[CaseId]:
        """The cases to collect, built from names alone, the foundations (foundations.ORDER)
        first, most primitive first, so that the first failing case of a run names the op that is
        actually wrong; (overload, dtype) pairs without samples are left out (the run header
        names them once, see engine/coverage.py)."""
        paths = [p for p in self.options.paths if p == "native" or self.backend.can_route_fallback]
        out = []
        rank = {op: i for i, op in enumerate(FOUNDATION_ORDER)}
        for overload in sorted(self.overloads, key=lambda o: rank.get(o, len(rank))):
            routes = [p for p in paths if p == "native" or self.backend.fallback_routable(overload)]
            out += self._cases_of(overload, self._dtypes(overload, False), routes)
        for overload in self.fallback_only:
            path = self._unregistered_path(overload)
            if path in self.options.paths:
                out += self._cases_of(overload, self._dtypes(overload, True), [path])
        layouts = list(self.options.layouts)
        for overload in self.grad_only:  # as the device runs them: no route of their own
            out += self._mode_cases(overload, self._dtypes(overload, True), ["native"], layouts)
        return out

    def collected_cases(self) -> list[CaseId]:
        """The cases this process builds items for: `cases()` that -k keeps, then this shard's
        part of them (--shard): computed once."""
        if self._collected is None:
            cases = [c for c in self.cases() if self.keep is None or self.keep(str(c))]
            shard, partition = self.shard, self.partition
            if shard is not None and partition is not None:
                ids = [f"{TEST_NAME}[{c}]" for c in cases]
                mine = [s == shard.index - 1 for s in partition.assign(ids)]
                self._shard_account = {
                    "index": shard.index,
                    "count": shard.count,
                    "cases": sum(mine),
                    "total": len(ids),
                    "balanced_by": partition.describe(),
                    # fingerprints every shard of one run shares (the report checks them)
                    "case_list": digest(ids),
                    "partition": partition.last_digest,
                }
                cases = [c for c, keep in zip(cases, mine, strict=True) if keep]
            self._collected = cases
            self.summary.save()  # what the mode account asked CPU
        return self._collected

    def shard_keeps(self, record_ids: list[str]) -> list[bool]:
        """Which of these (the scenarios) this shard runs; all of them without --shard. Called
        after the cases were assigned, so the loads of the cases count."""
        if self.shard is None or self.partition is None:
            return [True] * len(record_ids)
        self.collected_cases()
        return [s == self.shard.index - 1 for s in self.partition.assign(record_ids)]

    def shard_account(self) -> dict[str, Any] | None:
        """Which shard this run is (run.json `shard`; the report merges shards by it)."""
        if self.shard is None:
            return None
        self.collected_cases()
        return self._shard_account

    def shard_line(self) -> str | None:
        """The run header's line about --shard."""
        account = self.shard_account()
        if account is None:
            return None
        return (
            f"shard {self.shard}: {account['cases']} of {account['total']} cases, balanced by "
            f"{account['balanced_by']}; scenarios split alike; coverage and modes below are the "
            "whole run's"
        )

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

    def _cases_of(
        self, overload: str, dtypes: list[torch.dtype], paths: list[str], probe: bool = True
    ) -> list:
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
            if not self._has_samples(overload, dtype):
                continue
            name = dtype_name(dtype)
            if ORDINARY in self.options.values:
                out += [CaseId(overload, name, lo, p) for lo in layouts for p in paths]
            for v in value_sets:
                if values.applies(overload, dtype, v):
                    out += [CaseId(overload, name, "contiguous", p, v) for p in paths]
        return out + self._mode_cases(overload, dtypes, paths, layouts, probe)

    def _mode_cases(
        self,
        overload: str,
        dtypes: list[torch.dtype],
        paths: list[str],
        layouts: list[str],
        probe: bool = True,
    ) -> list[CaseId]:
        """The -grad and -inference cases of one overload (--modes)."""
        dtypes = [d for d in dtypes if self._has_samples(overload, d)]
        out = []
        if "grad" in self.options.modes and self.modes.grad_reason(overload, probe) is None:
            allowed = (
                gradients.DECOMPOSITION_GRAD_DTYPES
                if overload in self.grad_only
                else gradients.GRAD_DTYPES
            )
            for dtype in (d for d in dtypes if d in allowed):
                grad_layouts = [lo for lo in layouts if lo in gradients.GRAD_CASE_LAYOUTS]
                out += [
                    CaseId(overload, dtype_name(dtype), lo, p, "grad")
                    for lo in grad_layouts
                    for p in paths
                ]
        if overload in self.grad_only:
            return out
        if "inference" in self.options.modes and dtypes and "contiguous" in layouts:
            if self.modes.inference_applies(overload):
                name = dtype_name(dtypes[0])
                out += [CaseId(overload, name, "contiguous", p, "inference") for p in paths]
        return out

    def calls(self, overload: str, dtype: torch.dtype, value_set: str = "") -> list:
        """Samples of (overload, dtype, value set), kept while cases use them (the cases of
        one overload share them); the modes (grad, inference) run the ordinary samples."""
        value_set = "" if value_set in MODES else value_set
        key = (overload, dtype, value_set)
        if key in self._calls:
            self._calls.move_to_end(key)
            return self._calls[key]
        calls = samples.calls_for(
            overload, dtype, self.cache_dir, value_set, limit=self._sample_limit(overload)
        )
        self._calls[key] = calls
        if len(self._calls) > CALLS_KEPT:
            self._calls.popitem(last=False)
        return calls

    def _sample_limit(self, overload: str) -> int:
        if overload in self._fallback_only_set:
            return samples.MAX_FALLBACK_SAMPLES
        return samples.MAX_OPINFO_SAMPLES

    def sample_count(self, overload: str, dtype: torch.dtype) -> int:
        """How many ordinary samples (overload, dtype) has (the coverage account), remembered
        between runs; raises coverage.SampleError when building them fails."""

        def count(overload: str) -> int | str:
            try:
                return len(self.calls(overload, dtype))
            except Exception as exc:  # noqa: BLE001 - remembered, reported by the cases
                return coverage.describe_error(exc)

        answer = self._remember(overload, dtype, "count", count)
        if isinstance(answer, str):
            raise coverage.SampleError(answer)
        return answer

    def _remember(
        self, overload: str, dtype: torch.dtype, what: str, compute: Callable[[str], Any]
    ) -> Any:
        """compute(overload)'s answer about the samples of (overload, dtype), from the summary on
        disk when their sources are OpInfo's (an op spec's own samples are code: asked every
        run). The key names what selects the samples: dtype and how many are kept."""
        if spec_for(overload).samples is not None:
            return compute(overload)
        key = f"{overload}|{dtype_name(dtype)}|{self._sample_limit(overload)}|{what}"
        return self.summary.remember(key, lambda: compute(overload))

    def selection(self) -> dict[str, Any]:
        """What the options selected of each dimension of a case id (run.json "selection"): a
        baseline widens a pattern to `*` only over dimensions the run did not narrow."""
        o = self.options
        return {
            "ops": o.ops,
            "dtypes": [dtype_name(d) for d in o.dtypes],
            "layouts": list(o.layouts),
            "paths": list(o.paths),
            "values": list(o.values),
            "modes": list(o.modes),
            "keyword": self.keyword,
        }

    @functools.cached_property
    def _mode_account(self) -> dict[str, Any]:
        if "grad" not in self.options.modes and "inference" not in self.options.modes:
            return {}
        tested = self._kept_by_keyword(self.overloads, False) + self._kept_by_keyword(
            self.fallback_only, True
        )
        grad_only = self._kept_by_keyword(self.grad_only, True)
        account: dict[str, Any] = {"modes": list(self.options.modes)}
        if "grad" in self.options.modes:
            by_reason = self.modes.account(tested + grad_only)
            with_grad = by_reason.pop("", [])
            account["grad"] = with_grad
            account["grad_only"] = [o for o in grad_only if o in with_grad]
            account["no_grad"] = by_reason
        if "inference" in self.options.modes:
            account["inference"] = [o for o in tested if self.modes.inference_applies(o)]
        return account

    def mode_account(self) -> dict[str, Any]:
        """Which overloads have -grad and -inference cases and why the others have no -grad
        ones (run header, run.json "modes"), for the overloads -k keeps; computed once."""
        return self._mode_account

    def mode_lines(self) -> list[str]:
        """The mode account as run header lines."""
        account = self.mode_account()
        lines = []
        if "grad" in account:
            grad, only = account["grad"], account["grad_only"]
            text = f"modes: -grad cases for {len(grad)} overloads (floating dtypes, layouts "
            text += f"{'/'.join(gradients.GRAD_CASE_LAYOUTS)}; grad_outputs "
            text += f"{'/'.join(gradients.GRAD_OUTPUT_LAYOUTS)})"
            if only:
                text += f", {len(only)} of them decompositions the models call: {', '.join(only)}"
            lines.append(text)
            for reason, names in account["no_grad"].items():
                lines.append(f"modes: no -grad cases, {reason}: {len(names)} ({', '.join(names)})")
        if "inference" in account:
            lines.append(
                f"modes: -inference cases for {len(account['inference'])} in-place/out=/view "
                "overloads (contiguous, one dtype)"
            )
        return lines

    def stale_expectations(self, records: list[CaseRecord]) -> list[str]:
        """Manifest patterns that match no case of the full matrix, and unsupported_dtypes that
        no case of the run needed (only judged when the run was not narrowed by
        --ops/--dtypes/--layouts/--paths), one line each."""
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
        cases = self.cases()
        ids = [str(case) for case in cases]
        paths = {case.path for case in cases}  # no fallback path on a backend that cannot route

        run = set(self.registered) | set(self.fallback_only)
        reachable = set(self.coverage.fallback_only) if self.coverage is not None else set()

        def judged(pattern: str) -> bool:
            """Fallback-only overloads outside this run's set (--fallback-ops) are not run, so
            their entries cannot be judged, nor patterns of a path this backend has no case of
            (no boxed fallback, no routing); entries naming any other op can."""
            parts = pattern.split("-")
            if len(parts) > 3 and parts[3] in PATHS and parts[3] not in paths:
                return False
            op = parts[0]
            if any(fnmatch.fnmatchcase(r, op) for r in run):
                return True
            return not any(fnmatch.fnmatchcase(r, op) for r in reachable)

        scenarios = [scenario_key(r.id) for r in records if r.path == "scenario"]

        def matches_none(entry: Entry, pattern: str) -> bool:
            if pattern.startswith(SCENARIO):  # judged when the scenarios ran
                return bool(scenarios) and not any(entry.matching(i) for i in scenarios)
            return judged(pattern) and not any(fnmatch.fnmatchcase(i, pattern) for i in ids)

        stale = [
            f"{e.status} entry {p!r} at {e.source} matches no case of the matrix; remove it or "
            "fix the pattern"
            for e in self.manifest.entries
            if not e.allocator or e.allocator == self.allocator
            for p in e.patterns
            if matches_none(Entry((p,), e.status, e.category, e.reason, e.source), p)
        ]
        needed = {r.dtype for r in records if r.status is Status.UNSUPPORTED}
        stale += [
            f"unsupported_dtypes {d!r} at {source}: no {d} case was unsupported; remove it"
            for d, source in self.manifest.unsupported_dtypes.items()
            if d not in needed and any(dtype_name(x) == d for x in o.dtypes)
        ]
        return stale

    def scenario_blame(self, own: str = "") -> Blame:
        """A failed scenario is blocked by a foundation its own error says the device has no
        kernel for, or else only by what every scenario uses by construction: the harness's own
        foundations on contiguous memory (allocation, the round trip that reads results back),
        probed in float32, the scenarios' dtype. Any other broken foundation (a copy of some
        view layout, a conversion) might be related: the scenario still fails on its own."""
        if missing_kernel(own) is not None:
            return self.foundations.blame("", torch.float32, "contiguous", set, own=own)
        # a kernel the device lacks raises where it is used: not related to another failure
        broken = [p for p in self.foundations.broken(torch.float32) if not p.no_kernel]
        needed = next((p for p in broken if p.harness and p.layout == "contiguous"), None)
        if needed is not None:
            return Blame(needed)
        return Blame(related=broken[0] if broken else None)

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

    def scenario_expectation(self, record_id: str) -> Entry | None:
        """The manifest entry of a scenario (a pattern `scenario:<name>`), if any."""
        return self.manifest.match(scenario_key(record_id), self.allocator)

    def declared_unsupported(self, case: CaseId, entry: Entry | None) -> str:
        """Where the manifest declares that `case` may be unsupported ("file:line": an entry
        with status "unsupported", or its dtype in unsupported_dtypes), else ""."""
        if entry is not None and entry.status == "unsupported":
            return entry.source
        return self.manifest.unsupported_dtypes.get(case.dtype, "")

    # ---- running ----------------------------------------------------------------------------
    def run(self, case: CaseId, item: pytest.Item) -> None:
        """Run the case; leave its result record on `item`; raise pytest outcomes."""
        nodeid = item.nodeid
        spec = spec_for(case.overload)
        try:
            calls = self.calls(case.overload, getattr(torch, case.dtype), case.values)
        except Exception as exc:  # the suite's own sample sources broke: not the backend's verdict
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            message = (
                f"[harness] building the samples of {case.overload} ({case.dtype}) failed: "
                f"{type(exc).__name__}: {text}\n  repro: {self.repro(nodeid)}"
            )
            item.stash[RECORD_KEY] = self.new_record(
                case, Status.ERROR, nodeid, check="harness", message=message
            )
            pytest.fail(message, pytrace=False)
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
            mode=case.values if case.values in MODES else "",
        )
        expected = self.expectation(case)
        xfail = expected is not None and expected.status == "xfail"
        if xfail and outcome.failure is not None and not expected.expects(outcome.failure.check):
            xfail = False  # another failure than the entry expects: a second bug, never excused
            outcome.failure.message += (
                f" (the manifest entry {expected.matching(str(case))!r} at {expected.source} "
                f"expects a [{'/'.join(expected.checks)}] failure: this is another one)"
            )
        declared = self.declared_unsupported(case, expected)
        if outcome.unsupported and outcome.failure is None and not xfail and not declared:
            if outcome.unsupported_cpu_computes:  # the device lacks what CPU has: a verdict
                outcome.failure = Mismatch("unsupported", undeclared(outcome.unsupported))
        if outcome.failure is not None or outcome.unsupported:
            self._diagnose(case, outcome, nodeid, xfail)
        record = self._record(case, outcome, nodeid)
        if expected is not None and expected.status in ("xfail", "unsupported"):
            record.extra.update(expected_by=expected.source, category=expected.category)
        elif declared and outcome.unsupported:
            record.extra.update(unsupported_dtype=declared, category="unsupported")
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

        failure = outcome.failure
        return write_repro(
            self.options.repro_dir,
            str(case),
            outcome.failed_call,
            backend=self.backend_name,
            headline=f"[{failure.check}] {failure.message}",
            routed=routed,
            env_prefix=self._env_prefix(),
            spec=spec_for(case.overload),
            has_check_memory=self.backend.hook("check_memory") is not None,
        )

    def environment(self) -> dict[str, str]:
        """The environment a case depends on (repros, run.json): the variables of the backend
        module and of the module that registered the device module (`ECHO_NPU_*` for echo_npu
        and wrappers of it), and whether torch autoloads backends."""
        from conformance.engine.backend import owner_of

        modules = {self.backend_name, owner_of(self.backend.device_type) or self.backend_name}
        prefixes = tuple(m.split(".")[0].upper() + "_" for m in sorted(modules))
        prefixes += ("TORCH_DEVICE_BACKEND_AUTOLOAD",)
        return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}

    def _env_prefix(self) -> str:
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in self.environment().items())

    @staticmethod
    def checkers() -> list[str]:
        """The preloaded memory checkers the run is under, as `tools/launch.py` flags."""
        preload = os.environ.get("LD_PRELOAD", "")
        pairs = (("libasan", "--asan"), ("malloc_debug", "--malloc-check"))
        return [flag for lib, flag in pairs if lib in preload]

    def _target(self, nodeid: str, path: str | None = None) -> list[str]:
        """The arguments that select this node from the directory pytest was started in, built
        from where the suite is installed (never from rootdir, which --results or --pyargs
        move): its file relative to that directory when it lies inside it, else `--pyargs` and
        the module (any folder, any rootdir)."""
        name = nodeid.rpartition("::")[2]
        path = os.path.realpath(path or os.path.join(PACKAGE_DIR, CASES_FILE))
        here = os.path.realpath(self.invocation_dir)
        if path.startswith(here + os.sep):
            return [f"{os.path.relpath(path, here)}::{name}"]
        module = os.path.relpath(os.path.splitext(path)[0], os.path.dirname(PACKAGE_DIR))
        return ["--pyargs", f"{module.replace(os.sep, '.')}::{name}"]

    def repro(self, nodeid: str, path: str | None = None) -> str:
        """One command that runs exactly this case again with every option that created it:
        the options the user set (flags or CONFORMANCE_* variables, as flags), --ops or
        --fallback-ops narrowed to the case's overload, the backend's environment."""
        # one case runs alone: the shard it was in does not apply to it, nor does the baseline
        override: dict[str, str | None] = dict.fromkeys(
            ("results", "repro_dir", "shard", "shard_durations", "write_expectations")
        )
        try:
            case = CaseId.parse(nodeid)
        except ValueError:
            case = None  # a scenario: its options as given
        if case is not None and case.overload in self.grad_only:
            override["ops"] = override["fallback_ops"] = None  # a decomposition the models call
        elif case is not None:
            registered = case.overload in self.registered
            override["ops"] = case.overload if registered else None
            override["fallback_ops"] = None if registered else case.overload
        if case is not None:
            for name, value in (
                ("dtypes", case.dtype),
                ("layouts", case.layout),
                ("paths", case.path),
            ):
                if name in self.options.given:
                    override[name] = value
        flags = [shlex.quote(f) for f in self.options.flags(**override)]
        target = [shlex.quote(a) for a in self._target(nodeid, path)]
        cmd = " ".join(["pytest", *target, *flags, "--results", "none"])
        checkers = self.checkers()
        if checkers:  # the run was under a preloaded checker: so is the repro
            cmd = f"python -m conformance.tools.launch {' '.join(checkers)} -- {cmd}"
        return f"{self._env_prefix()} {cmd}".strip()

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
        if outcome.blame_error:
            record.extra["blame"] = f"blame could not be computed: {outcome.blame_error}"
        return record

    def new_record(self, case: CaseId, status: Status, nodeid: str, **values: Any) -> CaseRecord:
        """A record of this run (torch, backend, allocator, repro filled in) for `case`."""
        return CaseRecord.for_case(
            case,
            status,
            torch=str(torch.__version__),
            backend=self.backend_name,
            allocator=self.allocator,
            repro=self.repro(nodeid),
            **values,
        )
