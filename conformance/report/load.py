"""Read results folders written by the suite (docs/RESULTS.md) into :class:`Run` objects.

A results folder holds ``cases-<worker>.jsonl`` (one JSON object per case) and ``run.json``. A run
killed mid-write leaves a truncated last line: it is skipped with a warning, never an error. A
folder without results of its own but with result subfolders (``results/`` of several nox
sessions, or downloaded CI artifacts) yields one run per subfolder, so one report can hold several
sessions (torch versions, allocators, sanitizers).

The shards of one run (``--shard K/N``: run.json ``shard``) are merged into one :class:`Run` when
they agree on what makes a run: torch, backend, device, allocator, python, the backend's
environment, preloaded checkers, the shard count and the case list. Shards that agree on that but
were partitioned differently, a shard given twice or a case recorded by two shards are a
:class:`ReportError`; a missing shard is a warning on the merged run.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import ConformanceUsageError
from conformance.findings import Finding, group_findings, unsupported_by_op
from conformance.record import (
    FAILING,
    OP_FAMILY,
    STATUS_ORDER,
    CaseRecord,
    status_rank,
    worst_status,
)
from conformance.sharding import session_name

__all__ = [
    "STATUSES",
    "FAILING",
    "Case",
    "ReportError",
    "Run",
    "load_durations",
    "load_results",
    "results_folders",
    "load_run",
    "status_rank",
    "worst_status",
]

#: Every case status, worst first (values of conformance.record.Status).
STATUSES: tuple[str, ...] = tuple(s.value for s in STATUS_ORDER)
#: The result record of one case: the suite's own type, read back.
Case = CaseRecord


class ReportError(ConformanceUsageError):
    """A results folder that cannot be read at all (one-line message)."""


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass
class Run:
    """One results folder: its ``run.json`` (``meta``, maybe empty) and its cases."""

    path: Path
    meta: dict[str, Any]
    cases: list[Case]
    warnings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The session name: the folder's name (``conformance-2.8-guard``), without the
        ``-shard-K-of-N`` of a shard's folder."""
        return session_name(self.path.name) if self.shard else self.path.name

    @property
    def shard(self) -> dict[str, Any]:
        """run.json ``shard`` (empty for a run that was not sharded)."""
        value = self.meta.get("shard")
        return value if isinstance(value, dict) else {}

    @property
    def torch(self) -> str:
        """The torch version of the run (``run.json``, else the cases), or ``?``."""
        return _text(self.meta.get("torch")) or self._from_cases("torch")

    @property
    def allocator(self) -> str:
        """The device allocator mode of the run, or ``?``."""
        return _text(self.meta.get("allocator")) or self._from_cases("allocator")

    @property
    def backend(self) -> str:
        """The backend module of the run, or ``?``."""
        return _text(self.meta.get("backend")) or self._from_cases("backend")

    @property
    def finished(self) -> bool:
        """Whether the run wrote its end record (a crash or kill leaves ``finished`` null)."""
        return bool(self.meta.get("finished"))

    @property
    def incomplete(self) -> list[str]:
        """Why the run does not account for every case it was to run (empty: it does): it did
        not finish, shards of it are missing (the cases they held were never seen), cases were
        not run."""
        reasons = []
        if self.meta and not self.finished:
            reasons.append("the run did not finish (crash, kill or still running)")
        missing = self.shard.get("missing") or []
        if missing:
            total, seen = int(self.shard.get("total") or 0), len(self.cases)
            if "family_total" in self.shard:  # the families' cases are in the shards too
                total += int(self.shard["family_total"])
            else:  # a suite that counted its op cases alone
                seen = len(self.op_cases())
            unseen = total - seen
            reasons.append(
                f"shard(s) {', '.join(map(str, missing))} of {self.shard.get('count')} missing: "
                f"{max(unseen, 0)} case(s) never seen"
            )
        not_run = sum(1 for c in self.cases if c.status.value == "not-run")
        if not_run:
            reasons.append(f"{not_run} case(s) not run")
        return reasons

    @property
    def label(self) -> str:
        """A short title: ``conformance-2.8-guard (torch 2.8.0, guard)``, ``, 4 shards``."""
        merged, count = self.shard.get("merged"), self.shard.get("count")
        shards = f", {len(merged)} of {count} shards" if merged else ""
        return f"{self.name} (torch {self.torch}, {self.allocator}{shards})"

    def _from_cases(self, key: str) -> str:
        for case in self.cases:
            if getattr(case, key):
                return str(getattr(case, key))
        return "?"

    def counts(self) -> Counter[str]:
        """Number of cases per status."""
        return Counter(c.status.value for c in self.cases)

    def findings(self) -> list[Finding]:
        """Failing cases grouped by root cause (conformance/findings.py)."""
        return group_findings(self.cases)

    def unsupported_by_op(self) -> dict[str, int]:
        return unsupported_by_op(self.cases)

    def family_cases(self) -> dict[str, list[Case]]:
        """The cases of every family but the op cases (scenarios, the runtime contract,
        collectives: not in the grid), by family, in the order the run recorded them."""
        out: dict[str, list[Case]] = {}
        for c in self.cases:
            if c.family != OP_FAMILY:
                out.setdefault(c.family, []).append(c)
        return out

    def op_cases(self) -> list[Case]:
        """The op cases (the grid), without the other families."""
        return [c for c in self.cases if c.family == OP_FAMILY]

    def failures(self) -> list[Case]:
        """Cases needing attention (crashed, error, failed, xpassed), worst first, then by id."""
        bad = [c for c in self.cases if c.status in FAILING]
        return sorted(bad, key=lambda c: (status_rank(c.status), c.op_name, c.id))


def _read_jsonl(path: Path, warnings: list[str]) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            last = number == len(lines) or all(not rest.strip() for rest in lines[number:])
            what = "truncated last line" if last else "malformed line"
            warnings.append(f"{path.name}:{number}: {what} skipped")
            continue
        if isinstance(data, dict):
            yield data
        else:
            warnings.append(f"{path.name}:{number}: not a JSON object, skipped")


def _has_results(path: Path) -> bool:
    return (path / "run.json").is_file() or any(path.glob("cases-*.jsonl"))


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read one results folder (``run.json`` is optional, e.g. after a crash at start)."""
    root = Path(path)
    warnings: list[str] = []
    meta: dict[str, Any] = {}
    run_json = root / "run.json"
    if run_json.is_file():
        try:
            loaded = json.loads(run_json.read_text(encoding="utf-8"))
            meta = loaded if isinstance(loaded, dict) else {}
        except json.JSONDecodeError:
            warnings.append("run.json: unreadable, ignored")
    else:
        warnings.append("run.json: missing")
    cases = [
        CaseRecord.from_json(data)
        for jsonl in sorted(root.glob("cases-*.jsonl"))
        for data in _read_jsonl(jsonl, warnings)
    ]
    run = Run(path=root, meta=meta, cases=cases, warnings=warnings)
    if meta and not run.finished:
        warnings.append("run did not finish (crash, kill or still running)")
    return run


def results_folders(path: Path) -> list[Path]:
    """The results folders ``path`` stands for: its subfolders with results, else itself."""
    if not path.is_dir():
        raise ReportError(f"results folder {path} does not exist")
    subdirs = [p for p in sorted(path.iterdir()) if p.is_dir() and _has_results(p)]
    if subdirs:  # a folder of sessions; its own loose files (plain `pytest`) are not one
        return subdirs
    if not _has_results(path):
        raise ReportError(
            f"no results in {path} (expected run.json or cases-*.jsonl in it or its "
            "subfolders; run the suite with --results DIR first)"
        )
    return [path]


def load_durations(path: str | os.PathLike[str]) -> dict[str, float]:
    """Seconds per case id in the results under ``path`` (a run, or a folder of runs: the
    longest where several recorded a case), for ``--shard-durations``."""
    out: dict[str, float] = {}
    for folder in results_folders(Path(path)):
        for case in load_run(folder).cases:
            if case.duration is not None:
                out[case.id] = max(case.duration, out.get(case.id, 0.0))
    return out


def _shard_key(run: Run) -> tuple[str, ...]:
    """What the shards of one run agree on (run.json)."""
    meta = run.meta
    same = [meta.get(k) for k in ("torch", "backend", "device", "allocator", "python")]
    same += [meta.get("environment"), meta.get("checkers")]
    same += [run.shard.get("count"), run.shard.get("case_list")]
    return tuple(json.dumps(v, sort_keys=True) for v in same)


def merge_shards(shards: list[Run]) -> Run:
    """One run from the shards of one run (see the module's docstring)."""
    shards = sorted(shards, key=lambda r: r.shard.get("index", 0))
    first = shards[0]
    name, count = first.name, first.shard.get("count")
    by_index: dict[object, Run] = {}
    for run in shards:
        index = run.shard.get("index")
        if index in by_index:
            raise ReportError(
                f"{name}: shard {index}/{count} given twice ({by_index[index].path}, {run.path})"
            )
        by_index[index] = run
        if run.shard.get("partition") != first.shard.get("partition"):
            raise ReportError(
                f"{name}: shards {first.shard.get('index')}/{count} ({first.path}) and "
                f"{index}/{count} ({run.path}) were partitioned differently: run every shard "
                "with the same --shard-durations"
            )
    owner: dict[str, Path] = {}
    for run in shards:
        for case in run.cases:
            if case.id in owner:
                raise ReportError(
                    f"{name}: case {case.id} recorded by two shards ({owner[case.id]}, {run.path})"
                )
            owner[case.id] = run.path
    meta = dict(first.meta)
    meta.pop("findings", None)  # a shard's own: the merged run's are computed from its cases
    finished = all(r.finished for r in shards)
    meta["finished"] = max(str(r.meta["finished"]) for r in shards) if finished else None
    for key in ("counts", "statuses", "accounting"):
        total: Counter[str] = Counter()
        for run in shards:
            total.update(run.meta.get(key) or {})
        meta[key] = dict(total)
    merged = [r.shard.get("index") for r in shards]
    own = {k: v for k, v in first.shard.items() if k not in ("index", "cases")}
    missing = [i for i in range(1, int(count or 0) + 1) if i not in merged]
    meta["shard"] = {**own, "merged": merged, "cases": len(owner), "missing": missing}
    warnings = [f"{r.path.name}: {w}" for r in shards for w in r.warnings]
    if missing:
        warnings.append(
            f"shard(s) {', '.join(map(str, missing))} of {count} missing: "
            f"{sum(r.shard.get('cases', 0) for r in shards)} of {first.shard.get('total')} cases"
        )
    cases = [case for run in shards for case in run.cases]
    return Run(path=first.path, meta=meta, cases=cases, warnings=warnings)


def _merge_sharded(runs: list[Run]) -> list[Run]:
    """Runs with the shards of each run merged, in the place of its first shard."""
    groups: dict[tuple[str, ...], list[Run]] = {}
    out: list[Run | tuple[str, ...]] = []
    for run in runs:
        if not run.shard:
            out.append(run)
            continue
        key = _shard_key(run)
        if key not in groups:
            out.append(key)
        groups.setdefault(key, []).append(run)
    return [merge_shards(groups[r]) if isinstance(r, tuple) else r for r in out]


def load_results(paths: Iterable[str | os.PathLike[str]]) -> list[Run]:
    """Read every results folder under ``paths`` (each a run, or a parent of runs).

    A folder with result subfolders stands for those (loose results of its own, e.g. from a plain
    ``pytest conformance`` into ``results/``, are left out). Runs are ordered as given, subfolders
    by name; the shards of one run become one run, where its first shard was. Raises
    :class:`ReportError` when a path does not exist or holds no results, or when shards clash.
    """
    runs = [load_run(folder) for raw in paths for folder in results_folders(Path(raw))]
    return _merge_sharded(runs)
