"""The run's accounts of what it tests and what it leaves out, for the run header and run.json:
coverage (every registered overload tested, or untested for a named reason; the fallback-only
and model-derived sets) and modes (which overloads get -grad and -inference cases and why the
others get no -grad ones). Both describe the whole run, in every shard, for the overloads -k
keeps."""

from __future__ import annotations

from typing import Any

from conformance import samples
from conformance.engine import coverage, discovery, workloads
from conformance.engine.modes import selected
from conformance.harness.cases import CaseList
from conformance.harness.sampling import RunSamples
from conformance.ops import RUNTIME_CALLS, spec_for
from conformance.samples import arguments, valuesets


def coverage_account(cases: CaseList, run_samples: RunSamples) -> coverage.Coverage:
    """Which registered and fallback-reachable overloads are tested, and why the others not."""
    reachable: list[str] = []
    if cases.has_fallback:
        reachable = discovery.fallback_overloads(
            samples.known_bases(cases.cache_dir), cases.backend.dispatch_key
        )
    return coverage.compute(
        cases.registered,
        cases.kept_by_keyword(cases.overloads, False),
        cases.options.dtypes,
        lambda overload: cases.dtypes(overload, overload in cases.fallback_only_set),
        run_samples.count,
        lambda overload: no_sample_reason(overload, cases.cache_dir),
        schemaless=cases.schemaless,
        by_key=cases.by_key,
        has_fallback=cases.has_fallback,
        fallback_only=reachable,
        fallback_selected=cases.kept_by_keyword(cases.fallback_only, True),
        fallback_set=",".join(cases.options.fallback_ops or ["models"]),
        excluded=list(cases.excluded),
        default_kernels=_model_default_kernels(cases),
        models=workloads.model_overloads(),
    )


def _model_default_kernels(cases: CaseList) -> list[str]:
    """Model-derived overloads this backend runs through torch's composite kernels and that
    this run does not test as ops (the coverage account names them)."""
    if cases.fallback_wanted() != ["models"]:
        return []
    chosen = set(cases.fallback_only)
    return [o for o in workloads.model_default_kernel_overloads() if o not in chosen]


def no_sample_reason(overload: str, cache_dir: str | None) -> str:
    from conformance.samples.opinfo import base_name, opinfo_index

    if overload in RUNTIME_CALLS:
        return RUNTIME_CALLS[overload]
    spec = spec_for(overload)
    if spec.samples is None and not (
        spec.opinfo_names or base_name(overload) in opinfo_index(cache_dir)
    ):
        return "no samples (no OpInfo entry and no op spec in conformance/ops)"
    return "no samples (no OpInfo sample reaches this overload; add an op spec)"


def mode_account(cases: CaseList) -> dict[str, Any]:
    """Which overloads have the cases of each mode --modes selects, and why the others have
    none (run header, run.json "modes"), for the overloads -k keeps (engine/modes/)."""
    chosen = selected(cases.options.modes, key="account_rank")
    if not chosen:
        return {}
    tested = cases.kept_by_keyword(cases.overloads, False) + cases.kept_by_keyword(
        cases.fallback_only, True
    )
    grad_only = cases.kept_by_keyword(cases.grad_only, True)
    account: dict[str, Any] = {"modes": list(cases.options.modes)}
    for mode in chosen:
        account |= mode.account(tested, grad_only, cases.mode_scope)
    return account


def mode_lines(account: dict[str, Any]) -> list[str]:
    """The mode account as run header lines."""
    chosen = selected(account.get("modes", []), key="account_rank")
    return [line for mode in chosen for line in mode.account_lines(account)]


REACHED = ("ordinary", "derived")


def argument_account(cases: CaseList, run_samples: RunSamples) -> dict[str, dict[str, str]]:
    """{overload: {class label: how it is reached ("ordinary", "derived") or why it is left
    out}} of the overloads this run tests (samples/arguments.py), merged over their dtypes: a
    class counts as reached where any dtype reaches it (run header, run.json "arguments")."""
    if "arguments" not in cases.options.values:
        return {}
    tested = cases.kept_by_keyword(cases.overloads, False) + cases.kept_by_keyword(
        cases.fallback_only, True
    )
    found: dict[str, dict[str, str]] = {}
    for overload in tested:
        labels = [c.label for c in arguments.classes(overload)]
        if not labels:
            continue
        dtypes = cases.dtypes(overload, overload in cases.fallback_only_set)
        dtypes = [d for d in dtypes if cases._has_samples(overload, d)]
        if not dtypes:
            found[overload] = dict.fromkeys(labels, "no samples")
            continue
        merged: dict[str, str] = {}
        for dtype in dtypes:
            derive = valuesets.runs(overload, dtype, "arguments")
            for label, how in run_samples.arguments(overload, dtype, derive).items():
                if merged.get(label) not in REACHED:
                    merged[label] = how or "not derived"
        found[overload] = merged
    return found


def argument_lines(account: dict[str, dict[str, str]]) -> list[str]:
    """The argument account as run header lines: totals, then each class left out with the
    reason, grouped by reason (every other class is reached)."""
    if not account:
        return []
    total = sum(len(v) for v in account.values())
    hows = [how for classes in account.values() for how in classes.values()]
    ordinary, derived = hows.count("ordinary"), hows.count("derived")
    left: dict[str, list[str]] = {}
    for overload, classes in sorted(account.items()):
        for label, how in sorted(classes.items()):  # cached or computed: one order
            if how not in REACHED:
                left.setdefault(how, []).append(f"{overload} {label}")
    lines = [
        f"arguments: {ordinary + derived} of {total} value classes of {len(account)} overloads "
        f"reached ({ordinary} by the samples, {derived} by -arguments cases); "
        f"{total - ordinary - derived} left out"
        + (", by reason below" if left else "")
        + " (run.json 'arguments' has every overload's classes)"
    ]
    for why, labels in sorted(left.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(labels[:12]) + (
            f", ... ({len(labels) - 12} more)" if len(labels) > 12 else ""
        )
        lines.append(f"arguments: left out, {why}: {len(labels)} ({shown})")
    return lines
