"""The state of one conformance run: the backend, its case list, the manifest, the foundations
and the collaborators that run cases (`verdicts.py`) and write repro lines (`repro_lines.py`).

Created lazily by the session when conformance cases are collected (other pytest runs never
pay). Everything here is the run's, in objects; the pytest hooks live in `session.py`.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import pytest
import torch

from conformance.engine.backend import Backend, load_backend
from conformance.engine.coverage import Coverage
from conformance.engine.foundations import Blame, Foundations, Probe
from conformance.harness.accounts import (
    argument_account,
    argument_lines,
    coverage_account,
    mode_account,
    mode_lines,
)
from conformance.harness.cases import CaseList
from conformance.harness.expectations import (
    Entry,
    Manifest,
    default_manifest_paths,
    load_manifest,
    scenario_key,
)
from conformance.harness.keyword import keyword_filter
from conformance.harness.options import Options
from conformance.harness.repro_lines import ReproLines
from conformance.harness.rundir import RunDir
from conformance.harness.sampling import RunSamples, dtype_name
from conformance.harness.stale import stale_expectations
from conformance.harness.verdicts import CaseVerdicts
from conformance.record import CaseId, CaseRecord, Status, missing_kernel

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE_TIMEOUT = 30.0  # seconds one foundation probe may take in its own process


class Suite:
    """One run's state (see the module docstring)."""

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
        self.keep = keyword_filter(keyword)  # pytest -k as a case-id predicate (None: all)
        self.keyword = keyword or ""
        self.cache_dir = cache_dir
        self.worker = worker
        # never touches the device: usability is probed where forking cannot suffer from it
        self.backend: Backend = load_backend(options.backend, options.device)
        self.backend.heap_zones, self.backend.heap_cache = options.heap_zones, cache_dir
        self.backend_name = self.backend.module_name
        self.allocator = self.backend.allocator_mode()
        self.manifest = self._manifest()
        self.samples = RunSamples(cache_dir, options.sizes)
        self.case_list = CaseList.for_run(
            options,
            self.backend,
            self.samples,
            self.keep,
            keyword=self.keyword,
            # a spawned case runner collects every case (its parent chose which ones run)
            sharded=with_coverage,
        )
        self.modes = self.case_list.modes
        self.case_list.coverage = self._coverage() if with_coverage else None
        self.arguments = argument_account(self.case_list, self.samples) if with_coverage else {}
        self.samples.summary.save()
        self._mode_account: dict[str, Any] | None = None
        # where processes of this run share what they found (set by the session; None: alone)
        self.run_dir: RunDir | None = None
        self.foundations = Foundations(
            self.backend.device,
            set(self.registered),
            prober=self._probe_foundations,
            has_fallback=self.case_list.has_fallback,
        )
        self.repro_lines = ReproLines(options, self.backend, self.case_list, invocation_dir)
        self.verdicts = CaseVerdicts(self)

    def _coverage(self) -> Coverage:
        return coverage_account(self.case_list, self.samples)

    def _manifest(self) -> Manifest:
        paths = self.options.expectations
        if paths is None:
            paths = default_manifest_paths(REPO_ROOT, self.backend_name, torch.__version__)
        return load_manifest(paths)

    def _probe_foundations(self, dtype: torch.dtype) -> list[Probe]:
        """The failed foundation probes of `dtype`: run once per run, in a process of their own
        (engine/probing.py), shared by every worker and runner through the run folder."""
        from conformance.engine.probing import probe_isolated

        name = dtype_name(dtype)

        def compute() -> list[dict]:
            probes = probe_isolated(self.options.backend, self.options.device, name, PROBE_TIMEOUT)
            return [asdict(p) for p in probes]

        found = self.run_dir.shared(f"foundation-{name}.json", compute) if self.run_dir else None
        return [Probe(**p) for p in (found if found is not None else compute())]

    # ---- the case list (cases.py) and its accounts (accounts.py) ------------------------------
    @property
    def registered(self) -> list[str]:
        return self.case_list.registered

    @property
    def fallback_only(self) -> list[str]:
        return self.case_list.fallback_only

    @property
    def grad_only(self) -> list[str]:
        return self.case_list.grad_only

    @property
    def coverage(self) -> Coverage | None:
        return self.case_list.coverage

    @property
    def excluded(self) -> dict[str, str]:
        """Model-derived overloads left out, and why (conformance/workloads/excluded.toml)."""
        return self.case_list.excluded

    def cases(self) -> list[CaseId]:
        return self.case_list.cases()

    def collected_cases(self) -> list[CaseId]:
        return self.case_list.collected_cases()

    def shard_keeps(self, record_ids: list[str]) -> list[bool]:
        return self.case_list.shard_keeps(record_ids)

    def shard_account(self) -> dict[str, Any] | None:
        return self.case_list.shard_account()

    def shard_line(self) -> str | None:
        return self.case_list.shard_line()

    def selection(self) -> dict[str, Any]:
        return self.case_list.selection()

    def mode_account(self) -> dict[str, Any]:
        """Which overloads have -grad and -inference cases (computed once)."""
        if self._mode_account is None:
            self._mode_account = mode_account(self.case_list)
        return self._mode_account

    def mode_lines(self) -> list[str]:
        return mode_lines(self.mode_account())

    def argument_lines(self) -> list[str]:
        return argument_lines(self.arguments)

    def stale_expectations(
        self, records: list[CaseRecord], selected_by_keyword: bool = False
    ) -> list[str]:
        return stale_expectations(
            self.manifest, self.case_list, records, self.allocator, selected_by_keyword
        )

    # ---- the manifest --------------------------------------------------------------------------
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

    # ---- running (verdicts.py), blame of scenarios, repro lines (repro_lines.py) ---------------
    def run(self, case: CaseId, item: pytest.Item) -> None:
        self.verdicts.run(case, item)

    def new_record(self, case: CaseId, status: Status, nodeid: str, **values: Any) -> CaseRecord:
        return self.verdicts.new_record(case, status, nodeid, **values)

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

    def repro(self, nodeid: str, path: str | None = None) -> str:
        return self.repro_lines.repro(nodeid, path)

    def environment(self) -> dict[str, str]:
        return self.repro_lines.environment()

    @staticmethod
    def checkers() -> list[str]:
        return ReproLines.checkers()
