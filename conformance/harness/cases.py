"""What runs: the run's case list.

The overloads selected (`--ops`, the fallback-only set of `--fallback-ops`, the decompositions the
models call that get -grad cases only), their dtypes, layouts, paths, value sets and modes as
case ids (`CaseId`), what `-k` keeps (applied to case ids before items are built) and, with
`--shard K/N`, this shard's part of them. Built from names alone: samples are only asked whether
they exist (the coverage account, `harness/accounts.py`, answers from the summary on disk).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable
from typing import Any

import torch

from conformance import samples
from conformance.engine import coverage, discovery, workloads
from conformance.engine.backend import Backend
from conformance.engine.foundations import ORDER as FOUNDATION_ORDER
from conformance.engine.layouts import STORAGELESS_LAYOUTS
from conformance.engine.modes import CaseRequest, ModeScope, selected
from conformance.engine.modes.grad import GRAD
from conformance.errors import ConformanceUsageError
from conformance.harness.modes import ModeAccount
from conformance.harness.options import ORDINARY, Options
from conformance.harness.sampling import RunSamples, dtype_name
from conformance.harness.shard_partition import shard_partition
from conformance.ops import spec_for
from conformance.record import TEST_NAME, CaseId
from conformance.samples import valuesets
from conformance.samples.summary import SampleSummary
from conformance.sharding import digest


class CaseList:
    """The cases of one run (and of this shard), from the options and what the backend
    registered (`for_run` wires one to the run's samples)."""

    @classmethod
    def for_run(
        cls,
        options: Options,
        backend: Backend,
        samples: RunSamples,
        keep: Callable[[str], bool] | None = None,
        *,
        keyword: str = "",
        sharded: bool = True,
    ) -> CaseList:
        """The case list of a run whose samples are `samples`: its mode account asks them,
        they keep fewer samples for the fallback-only overloads, and the -arguments cases exist
        where they made a call (what the Suite and the power tool both build)."""
        modes = ModeAccount(samples.calls, samples.remember)
        cases = cls(
            options,
            backend,
            modes,
            samples.cache_dir,
            keep,
            keyword=keyword,
            sharded=sharded,
            summary=samples.summary,
        )
        samples.fallback_only = cases.fallback_only_set
        cases.derived = lambda o, d: "derived" in samples.arguments(o, d).values()
        cases.referenced = samples.has_reference
        return cases

    def __init__(
        self,
        options: Options,
        backend: Backend,
        modes: ModeAccount,
        cache_dir: str | None,
        keep: Callable[[str], bool] | None,
        *,
        keyword: str = "",
        sharded: bool = True,
        summary: SampleSummary | None = None,
    ) -> None:
        self.options = options
        self.backend = backend
        self.modes = modes
        self.cache_dir = cache_dir
        # pytest -k as a case-id predicate (None: keep all)
        self.keep = keep
        self.keyword = keyword
        self.summary = summary  # saved once the case list asked what it needed
        key = backend.dispatch_key
        # every key's kernels are op cases; only the backend key's can be routed through the
        # boxed fallback (a kernel at the autograd key runs before any routing)
        self.by_key = discovery.registrations_by_key(key)
        self.registered = discovery.case_overloads(self.by_key)
        self.routable = frozenset(self.by_key[key])
        self.schemaless = discovery.schemaless_registrations(key)
        self.has_fallback = discovery.has_backend_fallback(key)
        self.excluded = workloads.excluded()  # model-derived overloads left out, and why
        self.overloads = self.selected_overloads()  # validates --ops early
        self.fallback_only = self.selected_fallback_overloads()
        self.fallback_only_set = frozenset(self.fallback_only)
        self.grad_only = self.selected_grad_only_overloads()
        self._kept: dict[tuple[str, bool], bool] = {}  # kept_by_keyword's answers
        # (overload, dtype) pairs without samples (set with the coverage account; None: all have)
        self.coverage = None
        # whether (overload, dtype) has derived -arguments calls (None: assume so)
        self.derived: Callable[[str, torch.dtype], bool] | None = None
        # whether (overload, dtype) has -reference calls (None: assume so)
        self.referenced: Callable[[str, torch.dtype], bool] | None = None
        # --shard: a spawned runner collects every case (its parent chose which ones run)
        self.shard = options.shard if sharded else None
        self.partition = shard_partition(self.options) if sharded else None
        self._collected: list[CaseId] | None = None
        self._matrix: list[CaseId] | None = None  # every case, where collecting built them all
        self._shard_account: dict[str, Any] | None = None  # set with the collected cases

    @property
    def coverage(self) -> coverage.Coverage | None:
        """Which (overload, dtype) pairs have no samples (None: not known yet, all have)."""
        return self._coverage

    @coverage.setter
    def coverage(self, value: coverage.Coverage | None) -> None:
        self._coverage = value
        self._kept.clear()  # dtypes without samples have no case: what -k keeps is asked anew

    def _unregistered_path(self, overload: str) -> str:
        """The path of an overload this backend registered no kernel for: "fallback" when the
        boxed fallback serves it, "native" when torch's default (composite) kernel runs on the
        device (nothing is rerouted)."""
        kind = discovery.how_reached(overload, self.backend.dispatch_key)
        return "native" if kind == discovery.DEFAULT_KERNEL else "fallback"

    def kept_by_keyword(self, overloads: list[str], fallback_only: bool) -> list[str]:
        """The overloads with a case that -k keeps (all without -k): the coverage account
        builds samples, so a run narrowed by -k only pays for what it runs."""
        if self.keep is None:
            return list(overloads)
        return [o for o in overloads if self._kept_overload(o, fallback_only)]

    def _kept_overload(self, overload: str, fallback_only: bool) -> bool:
        """Whether -k keeps a case of `overload` (asked by each account: answered once)."""
        key = (overload, fallback_only)
        if key not in self._kept:
            paths = [self._unregistered_path(overload)] if fallback_only else self.options.paths
            dtypes = self.dtypes(overload, fallback_only)
            self._kept[key] = bool(
                self._cases_of(overload, dtypes, list(paths), probe=False, keep=self.keep)
            )
        return self._kept[key]

    def selected_overloads(self) -> list[str]:
        wanted = self.options.ops
        if not wanted:
            return self.registered
        if wanted == ["none"]:  # only --fallback-ops (a selection without a registered one)
            return []
        chosen = [o for o in self.registered if any(fnmatch.fnmatchcase(o, w) for w in wanted)]
        unknown = [w for w in wanted if not any(fnmatch.fnmatchcase(o, w) for o in self.registered)]
        if unknown:
            hint = ", ".join(self.registered[:12]) + (", ..." if len(self.registered) > 12 else "")
            raise ConformanceUsageError(
                f"--ops: {', '.join(unknown)} matches no overload registered by "
                f"{self.backend.module_name} (registered: {hint})"
            )
        return chosen

    def fallback_wanted(self) -> list[str]:
        """--fallback-ops as given, or its default: the model-derived set, none with --ops."""
        wanted = self.options.fallback_ops
        if wanted is None:
            return [] if self.options.ops else ["models"]
        return wanted

    def selected_fallback_overloads(self) -> list[str]:
        """--fallback-ops: overloads reached only through the boxed fallback. By default (no
        --ops) the model-derived set: what the workloads of engine/workloads.py reach through
        this backend's fallback, less conformance/workloads/excluded.toml."""
        wanted = self.fallback_wanted()
        if not wanted or wanted == ["none"]:
            return []
        if not self.has_fallback:
            if self.options.fallback_ops is None:
                return []  # the default: nothing reaches a fallback that does not exist
            raise ConformanceUsageError(
                f"--fallback-ops: {self.backend.module_name} registered no boxed fallback "
                "for PrivateUse1, so no op reaches cpu_fallback"
            )
        if wanted == ["models"]:
            return [o for o in workloads.model_fallback_overloads() if o not in self.excluded]
        known = samples.known_bases(self.cache_dir)
        if wanted == ["all"]:
            return discovery.fallback_overloads(known, self.backend.dispatch_key)
        # a glob also reaches overloads torch's composite kernels serve on this backend
        # (`_foreach_*`: tested as ops on the device, the "native" path)
        kinds, key = (discovery.FALLBACK, discovery.DEFAULT_KERNEL), self.backend.dispatch_key
        reachable = discovery.fallback_overloads(known, key, kinds=kinds, prefixes=True)
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
        if self.options.ops or GRAD.name not in self.options.modes:
            return []
        if self.fallback_wanted() not in (["models"], ["all"]):
            return []
        known = set(self.registered) | self.fallback_only_set | set(self.excluded)
        return [
            o
            for o in workloads.model_composite_overloads()
            if o not in known and self.modes.grad_reason(o, probe=False) is None
        ]

    def _has_samples(self, overload: str, dtype: torch.dtype) -> bool:
        return self.coverage is None or not self.coverage.missing(overload, dtype_name(dtype))

    def cases(self, keep: Callable[[str], bool] | None = None, probe: bool = True) -> list[CaseId]:
        """The cases to collect, built from names alone, the foundations (foundations.ORDER)
        first, most primitive first, so that the first failing case of a run names the op that is
        actually wrong; (overload, dtype) pairs without samples are left out (the run header
        names them once, see engine/coverage.py). `keep`: only the ids it keeps (-k), and no
        sample is built to decide on a case it drops. Without `probe`, no sample is built at
        all: the cases a sample decides on (-arguments, -reference, the modes') are kept, a
        superset of the run's."""
        paths = [p for p in self.options.paths if p == "native" or self.backend.can_route_fallback]
        out = []
        rank = {op: i for i, op in enumerate(FOUNDATION_ORDER)}
        for overload in sorted(self.overloads, key=lambda o: rank.get(o, len(rank))):
            routes = [
                p
                for p in paths
                if p == "native"
                or (overload in self.routable and self.backend.fallback_routable(overload))
            ]
            dtypes = self.dtypes(overload, False)
            out += self._cases_of(overload, dtypes, routes, probe, keep)
        for overload in self.fallback_only:
            path = self._unregistered_path(overload)
            if path in self.options.paths:
                out += self._cases_of(overload, self.dtypes(overload, True), [path], probe, keep)
        layouts = list(self.options.layouts)
        for overload in self.grad_only:  # as the device runs them: no route of their own
            dtypes = self.dtypes(overload, True)
            out += self._mode_cases(overload, dtypes, ["native"], layouts, probe, keep)
        return out

    def matrix_cases(self, named: Callable[[str], bool] | None = None) -> list[CaseId]:
        """Every case of the run's matrix, whatever -k kept: the ones collecting built where it
        built them all (no -k; before --shard took its part), else built anew under -k without
        building a sample (`cases(probe=False)`: a superset, so an entry judged by it is never
        called stale wrongly; a run without -k judges exactly), only the ids `named` keeps."""
        if self._matrix is not None:
            return self._matrix
        return self.cases(named, probe=self.keep is None)

    def collected_cases(self) -> list[CaseId]:
        """The cases this process builds items for: `cases()` that -k keeps, then this shard's
        part of them (--shard): computed once."""
        if self._collected is None:
            cases = self.cases(self.keep)
            if self.keep is None:
                self._matrix = cases  # before --shard takes its part: the whole matrix
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
            if self.summary is not None:
                self.summary.save()  # what the mode account asked CPU
        return self._collected

    def collect_given(self, ids: list[str]) -> None:
        """Collect exactly these cases: a spawned runner or zygote collects its owner's
        (harness/runners.py `write_case_file`), not a list it would choose anew."""
        self._collected = [CaseId.parse(i) for i in ids]

    def shard_keeps(self, record_ids: list[str]) -> list[bool]:
        """Which of these (the cases of the families) this shard runs; all of them without
        --shard. Called after the cases were assigned, so the loads of the cases count; the
        shard account counts them (`family_total`: a missing shard's unseen cases include
        them)."""
        if self.shard is None or self.partition is None:
            return [True] * len(record_ids)
        self.collected_cases()
        keeps = [s == self.shard.index - 1 for s in self.partition.assign(record_ids)]
        if self._shard_account is not None:
            account = self._shard_account
            account["family_total"] = account.get("family_total", 0) + len(record_ids)
        return keeps

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

    def dtypes(self, overload: str, fallback_only: bool) -> list[torch.dtype]:
        """The requested dtypes the op's spec allows; for fallback-only overloads also only
        those its OpInfos support on CPU (others would only be skipped)."""
        spec = spec_for(overload)
        dtypes = [d for d in self.options.dtypes if spec.dtypes is None or d in spec.dtypes]
        if fallback_only and spec.samples is None:
            from conformance.samples.opinfo import supported_dtypes

            supported = supported_dtypes(overload, self.cache_dir)
            if supported is not None:
                dtypes = [d for d in dtypes if dtype_name(d) in supported]
        return dtypes

    def _cases_of(
        self,
        overload: str,
        dtypes: list[torch.dtype],
        paths: list[str],
        probe: bool = True,
        keep: Callable[[str], bool] | None = None,
    ) -> list:
        if not self._may_keep(overload, keep):
            return []
        spec = spec_for(overload)
        layouts = [lo for lo in self.options.layouts if spec.layouts is None or lo in spec.layouts]
        if not self.backend.profile.storage.value:  # no memory to lay out: shapes and a view
            layouts = [lo for lo in layouts if lo in STORAGELESS_LAYOUTS]
        value_sets = [v for v in self.options.values if v != ORDINARY]
        if self.options.sizes == "none":
            value_sets = [v for v in value_sets if v != "sizes"]
        if "contiguous" not in layouts:
            value_sets = []

        def kept(ids: list[CaseId]) -> list[CaseId]:  # -k: nothing is asked of a case it drops
            return ids if keep is None else [c for c in ids if keep(str(c))]

        out = []
        for dtype in dtypes:
            if not self._has_samples(overload, dtype):
                continue
            name = dtype_name(dtype)
            if ORDINARY in self.options.values:
                out += kept([CaseId(overload, name, lo, p) for lo in layouts for p in paths])
            for v in value_sets:
                native = [p for p in paths if p == "native"]
                chosen = native if valuesets.value_set(v).kernels_only else paths
                ids = kept([CaseId(overload, name, "contiguous", p, v) for p in chosen])
                if not ids or not valuesets.runs(overload, dtype, v):
                    continue
                if v == "arguments" and probe and not self._derives(overload, dtype):
                    continue  # every class reached, or none can be made
                if v == "reference" and probe and self.referenced is not None:
                    if not self.referenced(overload, dtype):
                        continue  # OpInfo has no reference input unlike its samples
                out += ids
        return out + self._mode_cases(overload, dtypes, paths, layouts, probe, keep)

    def _may_keep(self, overload: str, keep: Callable[[str], bool] | None) -> bool:
        """Whether -k could keep a case of `overload`, from its name and the words the rest of
        a case id is made of in this run (no id built, no sample asked for the others)."""
        may_keep = getattr(keep, "may_keep", None)
        return may_keep is None or may_keep(overload, self._id_words)

    @functools.cached_property
    def _id_words(self) -> list[str]:
        """Every word a case id of this run may have after its overload (a superset)."""
        o = self.options
        modes = [m.name for m in selected(o.modes)]
        words = [*map(dtype_name, o.dtypes), *o.layouts, *o.paths, "native", "fallback"]
        return [*words, "contiguous", *o.values, *modes]

    def _derives(self, overload: str, dtype: torch.dtype) -> bool:
        """Whether the -arguments case of (overload, dtype) has a derived call (the account of
        samples/arguments.py, remembered on disk)."""
        return self.derived is None or self.derived(overload, dtype)

    def _mode_cases(
        self,
        overload: str,
        dtypes: list[torch.dtype],
        paths: list[str],
        layouts: list[str],
        probe: bool = True,
        keep: Callable[[str], bool] | None = None,
    ) -> list[CaseId]:
        """The cases of every mode --modes selects for one overload (engine/modes/); `keep`:
        a mode whose every case -k drops builds no sample to decide on them."""
        if not self._may_keep(overload, keep):
            return []
        dtypes = [d for d in dtypes if self._has_samples(overload, d)]
        want = CaseRequest(overload, dtypes, paths, layouts, probe)
        unprobed = CaseRequest(overload, dtypes, paths, layouts, False)
        out: list[CaseId] = []
        for mode in selected(self.options.modes):
            if keep is not None and probe:
                if not any(keep(str(c)) for c in mode.case_ids(unprobed, self.mode_scope)):
                    continue
            out += mode.case_ids(want, self.mode_scope)
        return out if keep is None else [c for c in out if keep(str(c))]

    @functools.cached_property
    def mode_scope(self) -> ModeScope:
        """What the modes ask of this run to choose their cases and write their account."""
        return ModeScope(self.backend, self.modes, frozenset(self.grad_only), dtype_name)

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
