"""Read results folders written by the suite (docs/RESULTS.md) into :class:`Run` objects.

A results folder holds ``cases-<worker>.jsonl`` (one JSON object per case) and ``run.json``. A run
killed mid-write leaves a truncated last line: it is skipped with a warning, never an error. A
folder without results of its own but with result subfolders (``results/`` of several nox
sessions, or downloaded CI artifacts) yields one run per subfolder, so one report can hold several
sessions (torch versions, allocators, sanitizers).
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
    STATUS_ORDER,
    CaseRecord,
    status_rank,
    worst_status,
)

__all__ = [
    "STATUSES",
    "FAILING",
    "Case",
    "ReportError",
    "Run",
    "load_results",
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
        """The session name: the folder's name (``conformance-2.8-guard``)."""
        return self.path.name

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
    def label(self) -> str:
        """A short title: ``conformance-2.8-guard (torch 2.8.0, guard)``."""
        return f"{self.name} (torch {self.torch}, {self.allocator})"

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
        return group_findings(c.to_json() for c in self.cases)

    def unsupported_by_op(self) -> dict[str, int]:
        return unsupported_by_op(c.to_json() for c in self.cases)

    def scenarios(self) -> list[Case]:
        """The end-to-end scenarios of the run (not op cases: not in the grid)."""
        return [c for c in self.cases if c.path == "scenario"]

    def op_cases(self) -> list[Case]:
        """The op cases (the grid), without the scenarios."""
        return [c for c in self.cases if c.path != "scenario"]

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


def load_results(paths: Iterable[str | os.PathLike[str]]) -> list[Run]:
    """Read every results folder under ``paths`` (each a run, or a parent of runs).

    A folder with result subfolders stands for those (loose results of its own, e.g. from a plain
    ``pytest conformance`` into ``results/``, are left out). Runs are ordered as given, subfolders
    by name. Raises :class:`ReportError` when a path does not exist or holds no results.
    """
    runs: list[Run] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise ReportError(f"results folder {path} does not exist")
        subdirs = [p for p in sorted(path.iterdir()) if p.is_dir() and _has_results(p)]
        if subdirs:  # a folder of sessions; its own loose files (plain `pytest`) are not one
            runs.extend(load_run(p) for p in subdirs)
            continue
        if not _has_results(path):
            raise ReportError(
                f"no results in {path} (expected run.json or cases-*.jsonl in it or its "
                "subfolders; run the suite with --results DIR first)"
            )
        runs.append(load_run(path))
    return runs
