"""What a run reports to PyTorch's Cross-Repository CI Relay (CRCR): the callback action's
`test-results` (a summary: counts, findings, timeouts, the run's link) and `failed-tests-detail`
(one entry per failing case, worst first, capped as the relay caps it), from results folders.

    python -m conformance.report results/crcr --crcr results/crcr.json
    # -> results/crcr.json (test-results) and results/crcr-failed.json (failed-tests-detail)
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.record import FAILING, Status
from conformance.report.load import Run

#: the relay keeps at most this many failed tests, and this much of each message; the whole list
#: stays under MAX_BYTES: the action gets it as one environment variable, which Linux caps at
#: 128 KiB (MAX_ARG_STRLEN)
MAX_FAILED, MESSAGE_BYTES, MAX_BYTES = 1000, 1024, 100 * 1024
#: findings listed by title in the summary (the rest are counted)
LISTED_FINDINGS = 20
#: what counts as passed and as skipped in the relay's three counts (failing: record.FAILING)
PASSED = (Status.PASSED, Status.XFAILED)
SKIPPED = (Status.SKIPPED, Status.UNSUPPORTED, Status.TORCH_BUG)


def run_url() -> str:
    """The CI run's link where the environment names one (GitHub Actions), else ''."""
    server, repo, run = (os.environ.get(k, "") for k in
                         ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))  # fmt: skip
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else ""


def test_results(runs: Sequence[Run]) -> dict[str, Any]:
    """The `test-results` summary of the runs (their cases together)."""
    statuses: Counter[str] = Counter()
    findings = []
    for run in runs:
        statuses.update(case.status.value for case in run.cases)
        findings += [(run.name, f) for f in run.findings()]
    count = lambda group: sum(statuses[s.value] for s in group)  # noqa: E731
    return {
        "total": sum(statuses.values()),
        "passed": count(PASSED),
        "failed": count(FAILING),
        "skipped": count(SKIPPED),
        "by_status": dict(sorted(statuses.items())),
        "timeouts": statuses[Status.HUNG.value],
        "crashes": statuses[Status.CRASHED.value],
        "findings": len(findings),
        "findings_listed": [
            {"id": f.id, "cell": cell, "title": f.title.splitlines()[0][:200], "cases": f.count}
            for cell, f in findings[:LISTED_FINDINGS]
        ],
        "cells": [run.name for run in runs],
        "torch": sorted({run.torch for run in runs}),
        "complete": not any(run.incomplete for run in runs),
        "run_url": run_url(),
        "suite": "torch-conformance",
    }


def _clip(text: str, limit: int) -> str:
    data = text.encode()
    return text if len(data) <= limit else data[: limit - 3].decode(errors="ignore") + "..."


def failed_tests(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """`failed-tests-detail`: the failing cases, worst first, at most MAX_FAILED and MAX_BYTES."""
    out: list[dict[str, Any]] = []
    size = 2
    for run in runs:
        for case in run.failures():
            entry = {
                "name": case.id,
                "classname": f"{run.name}.{case.family or 'ops'}.{case.op_name}",
                "message": _clip(
                    f"[{case.status.value}] {case.message or ''}".strip(), MESSAGE_BYTES
                ),  # fmt: skip
                "duration": case.duration,
            }
            size += len(json.dumps(entry)) + 1
            if len(out) == MAX_FAILED or size > MAX_BYTES:
                return out
            out.append(entry)
    return out


def write_crcr(runs: Sequence[Run], target: str | Path) -> list[Path]:
    """Write the summary to ``target`` and the failed tests beside it (`<stem>-failed.json`)."""
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    failed = path.with_name(f"{path.stem}-failed.json")
    path.write_text(json.dumps(test_results(runs), separators=(",", ":")), encoding="utf-8")
    failed.write_text(json.dumps(failed_tests(runs), separators=(",", ":")), encoding="utf-8")
    return [path, failed]
