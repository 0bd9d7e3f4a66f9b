"""The buffer donation scenarios on torch_xla's CPU client (issue 36): green on plain torch_xla,
red with torch_xla <= 2.5's save path planted back (tests/backends/xla_old_save.py), each failure
naming its sync point and the deleted buffer, in a run that completes (exit code 1, no crash).

Needs torch_xla in the interpreter that runs the self-tests (e.g. a venv with torch 2.9 and
torch_xla 2.9); skipped without it.
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.helpers import REPO, run_pytest

pytestmark = pytest.mark.skipif(
    find_spec("torch_xla") is None, reason="torch_xla is not installed in this interpreter"
)

SCENARIOS = frozenset(
    {
        "test_donation_save_subset[step]",
        "test_donation_save_subset[read]",
        "test_donation_seed_004",
        "test_donation_inplace_on_donated_input",
        "test_donation_optimizer_steps[SGD]",
        "test_donation_optimizer_steps[AdamW]",
        "test_donation_checkpoint_mid_training",
    }
)
# (scenario, the sync point its failure names) when xm.save donates a buffer still needed
OLD_SAVE_FAILS = (
    ("test_donation_save_subset[step]", "xm.save of a subset, then mark_step: the sync failed"),
    ("test_donation_save_subset[read]", "after xm.save of a subset (b): the live tensor s is not"),
    ("test_donation_seed_004", "xm.save(t1), then mark_step: the sync failed"),
    (
        "test_donation_checkpoint_mid_training",
        "checkpoint after AdamW step 3, then mark_step: the sync failed",
    ),
)
LOST_BUFFER = "Check failed: !buffer->IsDeleted(): buffer with shape"


def _run_on_xla(backend: str, results: Path, *args: str) -> tuple[int, str, list[dict]]:
    """The suite (`args`) against `backend` on torch_xla's CPU client: (exit code, output, every
    record)."""
    proc = run_pytest(
        *args,
        "-p",
        "no:cacheprovider",
        "--backend",
        backend,
        "--results",
        str(results),
        env={"PJRT_DEVICE": "CPU", "PYTHONPATH": str(REPO / "tests" / "backends")},
        timeout=600,
    )
    rows = [
        json.loads(x) for f in results.glob("cases-*.jsonl") for x in f.read_text().split("\n") if x
    ]
    return proc.returncode, proc.stdout + proc.stderr, rows


def _run(backend: str, results: Path) -> tuple[int, str, dict[str, dict]]:
    """The donation scenarios against `backend`: (exit code, output, records by scenario)."""
    code, output, rows = _run_on_xla(backend, results, "conformance/scenarios", "-k", "donation")
    return code, output, {r["overload"]: r for r in rows if r.get("path") == "scenario"}


def test_donation_scenarios_pass_on_torch_xla(tmp_path):
    code, output, records = _run("torch_xla", tmp_path / "results")
    assert code == 0, output[-3000:]
    assert set(records) == SCENARIOS, output[-3000:]
    not_passed = {
        k: (r["status"], r["message"]) for k, r in records.items() if r["status"] != "passed"
    }
    assert not not_passed, not_passed


def test_old_save_path_fails_the_save_scenarios_by_name(tmp_path):
    code, output, records = _run("xla_old_save", tmp_path / "results")
    assert code == 1, output[-3000:]
    assert "INTERNALERROR" not in output, output[-3000:]
    assert set(records) == SCENARIOS, output[-3000:]
    failed = {k for k, r in records.items() if r["status"] != "passed"}
    assert failed == {name for name, _ in OLD_SAVE_FAILS}, {
        k: records[k]["message"] for k in failed
    }
    for name, sync_point in OLD_SAVE_FAILS:
        record = records[name]
        assert record["status"] == "failed" and record["check"] == "scenario", record
        assert sync_point in record["message"], record["message"]
        assert LOST_BUFFER in record["message"] and "is deleted" in record["message"], record


def _sync_cases(backend: str, results: Path) -> tuple[int, str, list[dict]]:
    """The -sync cases of in-place and functional overloads against `backend`."""
    ops = "add.Tensor,add_.Tensor,lerp_.Scalar,index_put_"
    return _run_on_xla(backend, results, "--pyargs", "conformance", "--ops", ops, "-k", "sync")


def test_sync_cases_pass_on_torch_xla_and_name_the_lost_buffer_of_the_old_save(tmp_path):
    """The -sync cases save the first result alone while a pending read of each written
    argument needs its old buffer: green on 2.9, red for every in-place overload with the old
    save path, at the step after the save, naming the deleted buffer."""
    code, output, rows = _sync_cases("torch_xla", tmp_path / "plain")
    assert code == 0 and rows, output[-3000:]
    assert {r["status"] for r in rows} == {"passed"}, output[-3000:]
    assert all(r["compiles"] > 0 for r in rows)  # the runtime's own count, per case
    code, output, rows = _sync_cases("xla_old_save", tmp_path / "old")
    assert code == 1 and "INTERNALERROR" not in output, output[-3000:]
    failed = {r["op"]: r for r in rows if r["status"] == "failed"}
    assert set(failed) == {"add_", "lerp_", "index_put_"}, output[-3000:]
    for r in failed.values():
        assert r["check"] == "sync", r
        assert r["message"].startswith("[sync] the step after xm.save of output 0 alone"), r
        assert LOST_BUFFER in r["message"], r
