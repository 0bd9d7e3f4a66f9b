"""A results folder (conformance/report/load.py's Run) as the store's rows.

What identifies a run, what makes two runs the same configuration (the flake rule compares only
those), and each case's row: status, check, finding, duration and its message's first line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from conformance.errors import ConformanceUsageError
from conformance.record import FAILING, CaseRecord
from conformance.report.load import Run
from conformance.sharding import digest

#: a failing case's first message line is kept up to this many characters
MESSAGE_CHARS = 500


class NotARun(ConformanceUsageError):
    """A results folder the store cannot take (no run.json: it never started properly)."""


def seconds_between(start: str | None, end: str | None) -> float | None:
    """Seconds from one ISO 8601 stamp to another; None where either is missing."""
    if not start or not end:
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


@dataclass
class RunRows:
    """One results folder as rows: ``run`` for the runs table, ``cases`` (name -> its
    case_names row and its results row), ``findings`` for the findings table."""

    run: dict[str, Any]
    names: dict[str, dict[str, str]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)


def environment_json(meta: dict[str, Any]) -> str:
    """The run's backend environment and memory checkers, as the store keeps them."""
    env = {"environment": meta.get("environment") or {}, "checkers": meta.get("checkers") or []}
    return json.dumps(env, sort_keys=True)


def _registered(meta: dict[str, Any]) -> list[str]:
    """The overloads the backend registered (run.json coverage): what `--ops` may name."""
    coverage = meta.get("coverage")
    found = coverage.get("registered") if isinstance(coverage, dict) else None
    return [str(o) for o in found] if isinstance(found, list) else []


def run_rows(run: Run, source: str, added: str) -> RunRows:
    """The rows of one results folder; raises NotARun for a folder without run.json."""
    meta = run.meta
    if not meta or not meta.get("started"):
        raise NotARun(
            f"{run.path}: no run.json with a start time: not a run the store can date; run the "
            "suite with --results DIR (it writes run.json) or leave this folder out"
        )
    built = meta.get("compile_environment")
    built = built if isinstance(built, dict) else {}
    shard = run.shard
    whole = "merged" in shard  # shards merged by the report's loader before appending
    row: dict[str, Any] = {
        "started": str(meta["started"]),
        "finished": str(meta["finished"]) if meta.get("finished") else None,
        "cell": run.name,
        "torch": run.torch,
        "torch_git": str(built.get("torch git") or run.torch),
        "backend": run.backend,
        "backend_version": str(built.get("backend") or run.backend),
        "device": str(meta.get("device") or "?"),
        "allocator": run.allocator,
        "python": str(meta.get("python") or "?"),
        "environment": environment_json(meta),
        "shard_index": None if whole or not shard else int(shard.get("index") or 0),
        "shard_count": int(shard["count"]) if shard.get("count") else None,
        "exitstatus": meta.get("exitstatus"),
        "wall_s": seconds_between(meta.get("started"), meta.get("finished")),
        "cases": len(run.cases),
        "collected": (meta.get("accounting") or {}).get("collected"),
        "source": source,
        "added": added,
        "registered": json.dumps(sorted(_registered(meta))),
    }
    keys = ("torch", "torch_git", "backend_version", "device", "allocator", "cell", "environment")
    row["configuration"] = digest([row[k] for k in keys])
    row["key"] = digest([run.path.name, row["started"], row["shard_index"], row["cell"]])
    rows = RunRows(run=row)
    finding_of: dict[str, str] = {}
    for finding in run.findings():
        rep = finding.representative
        rows.findings.append(
            {
                "finding": finding.id,
                "title": finding.title,
                "check_name": finding.key.check or None,
                "cases": finding.count,
                "ops": json.dumps(finding.ops),
                "representative": rep.id,
                "repro": rep.repro,
                "message": rep.first_line[:MESSAGE_CHARS] or None,
            }
        )
        finding_of.update((case.id, finding.id) for case in finding.cases)
    for case in run.cases:
        rows.names[case.id] = name_row(case)
        rows.results[case.id] = result_row(case, finding_of.get(case.id))
    return rows


def name_row(case: CaseRecord) -> dict[str, str]:
    """The case_names row of a case (what the questions group by)."""
    return {
        "name": case.id,
        "family": case.family or "ops",
        "op": case.op_name,
        "dtype": case.dtype,
        "layout": case.layout,
        "path": case.path,
    }


def result_row(case: CaseRecord, finding: str | None) -> dict[str, Any]:
    """The results row of a case (without its run and name ids)."""
    failing = case.status in FAILING
    return {
        "status": case.status.value,
        "check_name": case.check,
        "finding": finding,
        "duration": case.duration,
        "message": case.first_line[:MESSAGE_CHARS] if failing and case.message else None,
    }
