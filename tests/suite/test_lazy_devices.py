"""A lazy device (issue 36): torch's own `torch._lazy` (tests/backends/lazy_backend.py), the
shape of torch_xla on its CPU client in every torch wheel: no observable storage, ops run at a
sync point, fallbacks counted by its runtime.

Run as a new user would (`--pyargs conformance` from another folder): every case is recorded,
the header says once that storage cannot be observed, no case fails on a stride or an offset,
the ops that fell back to CPU are named from the runtime's own counters, -sync cases read every
result back at every sync point; a write through a view that lands in the wrong place (planted)
is still a failure of that view op.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env, once_per_run

# slow: runs of torch._lazy, which traces and compiles every graph
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BACKEND = "lazy_backend:register"
# smooth_l1_loss_backward.grad_input: torch._lazy's TorchScript graph fails when it runs, at the
# sync point, for an out= of another dtype (CPU raises at the call)
OPS = [
    "--ops",
    "add.Tensor,masked_fill_.Scalar,transpose_copy.int,smooth_l1_loss_backward.grad_input",
    "--fallback-ops",
    "select.int,lerp_.Scalar,special_zeta",
]


def _run(
    tmp_path: Path, plant: str = "", ops: list[str] = OPS
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    results = tmp_path / "results"
    # the repository too: an ablation plugin (tests/meta/ablation.py) may ride on PYTEST_ADDOPTS
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "backends"), str(REPO)])}
    if plant:
        env[plant] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--pyargs", "conformance",
         "--backend", BACKEND, "--device", "lazy", *ops, "-k", "not test_qwen",
         "--results", str(results)],
        cwd=tmp_path, env=clean_env(env), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    records = [json.loads(line) for f in sorted(results.glob("cases-*.jsonl")) for line in f.open()]
    return proc, records


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return once_per_run(tmp_path_factory, "lazy", _run)


def test_every_case_is_recorded_and_the_header_says_storage_is_not_observable(clean):
    proc, records = clean
    out = proc.stdout
    assert "INTERNALERROR" not in out + proc.stderr, proc.stderr[-3000:]
    assert "storage: not observable on this device" in out
    assert out.count("storage: not observable on this device") == 1
    collected = int(out.split(" collected = ")[0].rsplit("conformance: ", 1)[1])
    assert collected == len(records) > 100


def test_no_case_fails_for_what_a_lazy_device_cannot_show(clean):
    _, records = clean
    failed = [r for r in records if r["status"] in ("failed", "error")]
    # torch._lazy's real divergences here: torch.save cannot serialise its tensors (the last
    # sync point of the -sync cases), and a graph that fails when it runs (smooth_l1_loss)
    sync = [r for r in failed if r["check"] == "sync" and r["op"] != "smooth_l1_loss_backward"]
    for r in sync:
        assert r["message"].startswith("[sync] torch.save of the device results"), r["message"]
    others = [r for r in failed if r["check"] != "sync"]
    assert {r["op"] for r in others} <= {"smooth_l1_loss_backward"}, others
    for word in ("stride", "storage_offset", "data_ptr", "outside/around the view"):
        assert not [r["id"] for r in failed if word in r["message"]], word
    # no memory to lay out: the layouts of other shapes, and a view made by view ops (issue 45)
    assert {r["layout"] for r in records if r["layout"] != "-"} == {
        "contiguous",
        "zero_size",
        "zero_dim",
        "transposed",
    }
    transposed = [r for r in records if r["layout"] == "transposed"]
    assert transposed and {r["status"] for r in transposed} <= {"passed", "skipped"}, transposed


def test_an_error_raised_at_the_sync_point_is_the_call_s(clean):
    _, records = clean
    case = next(
        r
        for r in records
        if r["id"] == "test_matches_cpu[smooth_l1_loss_backward.grad_input-float32-"
        "contiguous-native-promotion]"
    )
    assert case["check"] == "error", case  # compared with CPU's error, not a harness failure
    assert "device raised RuntimeError [other]: The following operation failed" in case["message"]


def test_what_fell_back_comes_from_the_runtime_s_own_counters(clean):
    proc, records = clean
    ran = {r["op"]: r["ran"] for r in records if r.get("ran") and not r["id"].endswith("-sync]")}
    assert ran["special_zeta"] == "fallback"  # no Lazy kernel: CPU through the boxed fallback
    assert ran["add"] == "native"
    assert "fell back to CPU (1 op(s): special_zeta)" in proc.stdout


def test_sync_cases_read_back_at_every_sync_point_and_count_compilations(clean):
    proc, records = clean
    sync = [r for r in records if r["id"].endswith("-sync]")]
    assert {r["op"] for r in sync} >= {"add", "masked_fill_", "transpose_copy", "special_zeta"}
    assert all("compiles" in r and "executions" in r for r in sync)
    assert "modes: -sync cases for" in proc.stdout or "-sync" in proc.stdout


def test_a_write_through_a_view_that_lands_elsewhere_fails_the_view_op(tmp_path):
    _, records = _run(tmp_path, plant="LAZY_PLANT_SELECT_SCATTER")
    by_id = {r["id"]: r for r in records}
    case = by_id["test_matches_cpu[select.int-float32-contiguous-native]"]
    assert case["status"] == "failed" and case["check"] == "view", case
    assert "values written into it reach 'self' differently from cpu" in case["message"]
    others = [r for r in records if r["op"] == "add" and r["status"] == "failed"]
    assert [r["check"] for r in others] == ["sync"]  # only torch.save, as without the plant


def test_a_case_that_breaks_the_runtime_costs_that_case_only(tmp_path):
    """The planted cosh leaves every later sync of its process failing (as torch_xla after some
    failed graphs): the runner is retired after it, so tanh's cases, run next, all pass."""
    _, records = _run(tmp_path, plant="LAZY_PLANT_BREAK_RUNTIME", ops=["--ops", "cosh,tanh"])
    cosh = [r for r in records if r["op"] == "cosh" and r["status"] == "failed"]
    assert cosh and all("planted: the runtime is broken" in r["message"] for r in cosh)
    tanh = [r for r in records if r["op"] == "tanh" and not r["id"].endswith("-sync]")]
    assert tanh and {r["status"] for r in tanh} <= {"passed", "skipped"}, [
        (r["id"], r["message"][:120]) for r in tanh if r["status"] == "failed"
    ]


def test_a_crash_after_a_cases_checks_says_so(tmp_path):
    """The planted crash comes after cosh's checks passed, in its runner's check that the device
    still works (on torch_xla: GRU's pending graph, run by that sync). The case is charged, its
    record says where it died, not "while running this case"."""
    ops = ["--ops", "cosh", "--layouts", "contiguous", "--modes", "none", "--paths", "native"]
    proc, records = _run(tmp_path, plant="LAZY_PLANT_CRASH_AFTER_COSH", ops=ops)
    cosh = [r for r in records if r["id"].startswith("test_matches_cpu[cosh-")]
    assert cosh, proc.stdout[-2000:]
    for r in cosh:
        assert r["status"] == "crashed", r
        assert "killed by SIGSEGV after this case's checks" in r["message"], r["message"]
        assert "while running this case" not in r["message"]
