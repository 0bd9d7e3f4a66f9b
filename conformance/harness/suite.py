"""The collaborators of one conformance run, built once when conformance cases are collected
(other pytest runs never pay): the backend (loaded and profiled by the session), the case list
and its accounts (`cases.py`, `accounts.py`), the manifest's expectations, the run's samples,
the foundations, the repro lines and the case verdicts. Callers use the collaborator they need
(`suite.case_list.cases()`, `suite.expectations.expectation(case)`, `suite.verdicts.run(...)`);
the pytest hooks live in `session.py`."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import torch

from conformance.engine.backend import Backend, load_backend
from conformance.engine.foundations import Foundations, Probe
from conformance.engine.probing import probe_isolated
from conformance.harness.accounts import argument_account, coverage_account, mode_account
from conformance.harness.cases import CaseList
from conformance.harness.expectations import (
    Expectations,
    Manifest,
    default_manifest_paths,
    load_manifest,
)
from conformance.harness.keyword import keyword_filter
from conformance.harness.options import Options
from conformance.harness.repro_lines import ReproLines
from conformance.harness.rundir import RunDir
from conformance.harness.sampling import RunSamples, dtype_name
from conformance.harness.verdicts import CaseVerdicts

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE_TIMEOUT = 30.0  # seconds one foundation probe may take in its own process


class Suite:
    """One run's collaborators (see the module docstring)."""

    def __init__(
        self,
        options: Options,
        cache_dir: str | None,
        worker: str,
        *,
        backend: Backend | None = None,
        run_dir: RunDir | None = None,
        invocation_dir: str = ".",
        with_coverage: bool = True,
        keyword: str | None = None,
        alone: str | None = None,
    ) -> None:
        self.options = options
        self.alone = alone  # the family whose folder is all the command line names, if one is
        self.family_plans: dict[str, Any] = {}  # family -> what it judges (Family.plan)
        self.keyword = keyword or ""
        self.cache_dir = cache_dir
        self.worker = worker
        # loaded (never touching the device) and profiled by the session; loaded here alone
        # where a test builds a Suite by itself
        if backend is None:
            backend = load_backend(options.backend, options.device)
            backend.heap_zones, backend.heap_cache = options.heap_zones, cache_dir
        self.backend: Backend = backend
        self.backend_name = backend.module_name
        self.allocator = backend.allocator_mode()
        # where processes of this run share what they found (None: alone)
        self.run_dir = run_dir
        self.manifest = self._manifest()
        self.expectations = Expectations(self.manifest, self.allocator)
        self.samples = RunSamples(cache_dir, options.sizes)
        self.case_list = CaseList.for_run(
            options,
            backend,
            self.samples,
            keyword_filter(keyword),  # pytest -k as a case-id predicate (None: all)
            keyword=self.keyword,
            # a spawned case runner collects every case (its parent chose which ones run)
            sharded=with_coverage,
        )
        if with_coverage:
            self.case_list.coverage = coverage_account(self.case_list, self.samples)
        self.arguments = argument_account(self.case_list, self.samples) if with_coverage else {}
        self.samples.summary.save()
        self._mode_account: dict[str, Any] | None = None
        self.foundations = Foundations(
            backend.device,
            set(self.case_list.registered),
            # on a device one process may open at a time, a probe process could not open it
            # while the case's runner holds it: probed in the runner (its verdict is noted)
            prober=None if backend.profile.exclusive.value else self._probe_foundations,
            has_fallback=self.case_list.has_fallback,
        )
        self.repro_lines = ReproLines(options, backend, self.case_list, invocation_dir)
        self.verdicts = CaseVerdicts(
            options,
            backend,
            self.samples,
            self.case_list.registered,
            self.expectations,
            self.foundations,
            self.repro_lines,
            run_dir,
        )

    def _manifest(self) -> Manifest:
        paths = self.options.expectations
        if paths is None:
            paths = default_manifest_paths(REPO_ROOT, self.backend_name, torch.__version__)
        return load_manifest(paths)

    def _probe_foundations(self, dtype: torch.dtype) -> list[Probe]:
        """The failed foundation probes of `dtype`: run once per run, in a process of their own
        (engine/probing.py, given the device profile whole), shared by every worker and runner
        through the run folder."""
        name = dtype_name(dtype)

        def compute() -> list[dict]:
            probes = probe_isolated(
                self.options.backend, self.options.device, name, PROBE_TIMEOUT, self.backend.profile
            )
            return [asdict(p) for p in probes]

        found = self.run_dir.shared(f"foundation-{name}.json", compute) if self.run_dir else None
        return [Probe(**p) for p in (found if found is not None else compute())]

    def mode_account(self) -> dict[str, Any]:
        """Which overloads have the cases of each mode, and why not (computed once)."""
        if self._mode_account is None:
            self._mode_account = mode_account(self.case_list)
        return self._mode_account
