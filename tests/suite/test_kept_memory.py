"""Memory a case leaves allocated once, and kept (issue 55, seen on an H200): cuBLAS allocates a
32 MiB workspace per handle at its first GEMM and keeps it, so the first addmm, addbmm,
baddbmm.out and _linalg_det cases of each runner failed `leak`. A leak grows with every call; a
workspace does not. echo_npu's switch `keeps_workspace` (not a fault) keeps a 64 KiB block from
mul.Tensor's first call; its fault `leak` leaks a block per call."""

from __future__ import annotations

import pytest

# one runner: what is kept once is kept once per runner (one per core without -n otherwise)
ARGS = ("-p", "no:xdist", "--backend", "echo_npu", "--ops", "mul.Tensor", "--fallback-ops",
        "none", "--dtypes", "float32", "--paths", "native", "--runners", "1")  # fmt: skip


def _records(run_suite, switch: str) -> list[dict]:
    run = run_suite(*ARGS, env={"ECHO_NPU_FAULTS": switch}, timeout=600)
    assert run.results, run.output[-3000:]
    return run.results


@pytest.mark.parametrize("switch", ["keeps_workspace"])
def test_a_workspace_kept_once_is_no_leak(run_suite, switch):
    records = _records(run_suite, switch)
    failed = [(r["id"], r["message"]) for r in records if r["status"] not in ("passed", "skipped")]
    assert not failed, failed
    notes = [r for r in records if "kept once (a workspace or a cache)" in (r["message"] or "")]
    assert len(notes) == 1, [r["message"] for r in records]  # the first mul of the runner


def test_a_leak_that_grows_with_every_call_still_fails(run_suite):
    records = _records(run_suite, "leak")
    leaks = [r for r in records if r["check"] == "leak"]
    assert leaks and all(r["status"] == "failed" for r in leaks), records[:3]
