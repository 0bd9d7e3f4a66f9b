"""What run.json says about the run (docs/RESULTS.md): at its start, what it tests with what
(torch, backend, header, the environment and checkers that make shards of one run, the shard,
the coverage and mode accounts, the selection); at its end, counts, statuses, accounting,
findings and what the verdicts relied on."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from conformance.engine.environment import compile_environment
from conformance.engine.sample_run import checks_left_out
from conformance.findings import Finding
from conformance.harness.header import header_lines, relies_on
from conformance.harness.recorder import now, run_info
from conformance.record import CaseRecord

if TYPE_CHECKING:
    from conformance.harness.plan import Plan
    from conformance.harness.suite import Suite


def start_info(suite: Suite, plan: Plan | None) -> dict[str, Any]:
    """run.json at the start of the run."""
    info = run_info(
        str(torch.__version__), suite.backend_name, suite.backend.device_type, suite.allocator
    )
    info["backend_spec"] = suite.backend.spec  # how it was loaded: module[:register function]
    info["header"] = header_lines(suite, plan)
    info["profile"] = suite.backend.profile.to_json()  # what the run knows about the device
    info["checks_left_out"] = checks_left_out(suite.backend.profile)
    # what makes shards of one run (the report merges those that agree on all of it)
    info["environment"] = suite.repro_lines.environment()
    # what the verdicts may depend on beyond the code (report --diff compares two runs on it)
    info["compile_environment"] = compile_environment(suite.backend.module_name, suite.allocator)
    info["checkers"] = suite.repro_lines.checkers()
    shard = suite.case_list.shard_account()
    if shard is not None:
        info["shard"] = shard
    if suite.case_list.coverage is not None:
        info["coverage"] = suite.case_list.coverage.to_json()
    info["modes"] = suite.mode_account()
    if suite.arguments:
        info["arguments"] = suite.arguments
    info["selection"] = suite.case_list.selection()
    return info


def finish_info(
    info: dict[str, Any],
    suite: Suite,
    stats: dict[str, list],
    records: list[CaseRecord],
    accounting: dict[str, int],
    findings: list[Finding],
    exitstatus: int,
) -> None:
    """run.json at the end of the run (`stats`: pytest's terminal reporter's)."""
    info["finished"] = now()
    info["counts"] = dict(Counter({k: len(v) for k, v in stats.items() if k}))
    info["statuses"] = dict(Counter(r.status.value for r in records))
    info["accounting"] = accounting
    info["findings"] = [f.to_json() for f in findings]
    info["relies_on"] = relies_on(suite)
    info["exitstatus"] = int(exitstatus)
