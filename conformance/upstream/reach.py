"""What a results folder can speak for: refused when partial, its unmeasured ops and dtypes named.

A configuration excuses only what a run measured. A run that did not finish, a cases file cut
short (a truncated line, or fewer records than run.json counts), a missing or corrupt run.json,
missing shards or cases never run: each is refused with one line naming it (`--allow-partial`
accepts it, and the file says so). The OpInfos the backend registers a kernel for but the run
did not measure, and the dtypes the modelled tests run that it did not measure, are named in the
file and printed; unmeasured OpInfos stay out of the allowlist unless asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from conformance.record import CaseRecord
from conformance.report.load import Run

__all__ = ("partial_reasons", "unmeasured")


def partial_reasons(run: Run) -> list[str]:
    """Why `run` does not hold every case it ran (empty: it does)."""
    reasons = []
    for warning in run.warnings:
        if warning.startswith("run.json: missing"):
            reasons.append("run.json is missing (the run stopped before it began, or was copied "
                           "without it)")  # fmt: skip
        elif warning.startswith("run.json: unreadable"):
            reasons.append("run.json is corrupt (not JSON)")
        elif "truncated last line" in warning or "malformed line" in warning:
            reasons.append(f"a cases file is cut short ({warning})")
    reasons += run.incomplete
    counted = run.meta.get("statuses") or run.meta.get("counts") or {}
    if isinstance(counted, Mapping) and run.finished:
        total = sum(int(v) for v in counted.values() if isinstance(v, int))
        if total > len(run.cases):
            reasons.append(
                f"its cases files hold {len(run.cases)} of the {total} cases run.json counts "
                "(a cases file cut short or missing)"
            )
    return list(dict.fromkeys(reasons))


def unmeasured(
    registered_ops: Mapping[str, Sequence[str]],
    records: Iterable[CaseRecord],
    tested: Callable[[str], set[str]],
) -> tuple[set[str], list[str]]:
    """(measured OpInfos, lines naming what was not measured): `registered_ops` maps each
    OpInfo of a registered overload to those overloads; `tested(op)` gives the dtypes the
    modelled tests run the OpInfo in."""
    measured_pairs: dict[str, set[str]] = {}
    for r in records:
        measured_pairs.setdefault(r.op_name, set()).add(r.dtype)
    lines, measured = [], set()
    for op, overloads in sorted(registered_ops.items()):
        dtypes = set().union(*(measured_pairs.get(o, set()) for o in overloads))
        if not dtypes:
            lines.append(f"{op}: none of {', '.join(overloads)} ran")
            continue
        measured.add(op)
        missing = sorted(tested(op) - dtypes)
        if missing:
            lines.append(f"{op}: dtypes {', '.join(missing)} (its tests run them)")
    return measured, lines
