"""Memory a case leaves allocated once, and kept (issue 55, seen on an H200): cuBLAS allocates a
32 MiB workspace per handle at its first GEMM and keeps it, so the first addmm, addbmm,
baddbmm.out and _linalg_det cases of each runner failed `leak`. A leak grows with every call; a
workspace does not. echo_npu's switch `keeps_workspace` (not a fault) keeps a 64 KiB block from
mul.Tensor's first call; its fault `leak` leaks a block per call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, switch: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    results = tmp_path / switch
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", "conformance",
         "--backend", "echo_npu", "--ops", "mul.Tensor", "--fallback-ops", "none", "--dtypes",
         "float32", "--paths", "native", "--results", str(results)],
        cwd=REPO, env=clean_env({"ECHO_NPU_FAULTS": switch}),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    records = [json.loads(line) for f in sorted(results.glob("cases-*.jsonl")) for line in f.open()]
    assert records, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, records


@pytest.mark.parametrize("switch", ["keeps_workspace"])
def test_a_workspace_kept_once_is_no_leak(tmp_path, switch):
    _, records = _run(tmp_path, switch)
    failed = [(r["id"], r["message"]) for r in records if r["status"] not in ("passed", "skipped")]
    assert not failed, failed
    notes = [r for r in records if "kept once (a workspace or a cache)" in (r["message"] or "")]
    assert len(notes) == 1, [r["message"] for r in records]  # the first mul of the runner


def test_a_leak_that_grows_with_every_call_still_fails(tmp_path):
    _, records = _run(tmp_path, "leak")
    leaks = [r for r in records if r["check"] == "leak"]
    assert leaks and all(r["status"] == "failed" for r in leaks), records[:3]
