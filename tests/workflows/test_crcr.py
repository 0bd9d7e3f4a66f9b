"""PyTorch's cross-repository CI relay: the workflow `init --crcr` writes passes actionlint, its
callback steps are checked as the relay's action checks them, and rehearsed on echo_npu (a
dispatched PR, the nightly self-report, a failing run) it calls back with the conclusion and the
test-results the suite wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.ci.init import main as init_main
from conformance.ci.relay import CallbackError, callback
from tests.helpers import clean_env
from tests.workflows.test_workflows import _actionlint

PR = {"client_payload": {"event_type": "pull_request", "delivery_id": "d-1", "payload": {
    "action": "opened", "pull_request": {"number": 4242, "head": {"sha": "abc123"}},
    "repository": {"full_name": "pytorch/pytorch"}}}}  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "my-npu"
    assert init_main(["--dir", str(root), "--module", "echo_npu", "--crcr"]) == 0
    return root


def test_the_crcr_workflow_passes_actionlint(repo: Path) -> None:
    flow = repo / ".github" / "workflows" / "conformance-crcr.yml"
    _actionlint([flow], repo)
    data = yaml.safe_load(flow.read_text())
    on = data.pop(True, data.get("on"))
    assert on["repository_dispatch"]["types"] == ["pull_request", "push"] and "schedule" in on
    assert data["permissions"]["id-token"] == "write"


@pytest.mark.parametrize(
    "inputs, words",
    [
        ({"status": "done"}, "status must be"),
        ({"status": "completed"}, "needs its conclusion"),
        ({"status": "completed", "conclusion": "success", "delivery-id": "x"}, "go together"),
        ({"status": "in_progress", "delivery-id": "x", "event-type": "nightly"}, "completed"),
        ({"status": "completed", "conclusion": "success", "test-results": "{"}, "valid JSON"),
        ({"status": "completed", "conclusion": "success", "failed-tests-detail": "[{}]"}, "name"),
        ({"status": "in_progress"}, "no client_payload"),
    ],
)
def test_a_callback_the_action_would_refuse_fails_the_rehearsal(inputs, words, tmp_path) -> None:
    ctx = {"github": {"event": {}}} if "no client" in words else {"github": {"event": PR}}
    with pytest.raises(CallbackError, match=words):
        callback(inputs, ctx, tmp_path / "calls.jsonl")


def _seed(repo: Path) -> None:
    """A store with one earlier run of the cell (what the selection estimates from)."""
    results = repo.parent / "seed" / "crcr"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "--backend", "echo_npu",
           "--ops", "neg,abs", "-n", "0", "-q", "-p", "no:cacheprovider"]  # fmt: skip
    subprocess.run([*cmd, "--results", str(results)], cwd=repo, env=clean_env(), timeout=600)
    store = repo / "history" / "history.db"
    add = [sys.executable, "-m", "conformance.history", "--store", str(store), "add", str(results)]
    subprocess.run(add, env=clean_env(), check=True, capture_output=True, timeout=120)


def _rehearse(
    repo: Path, event: str, payload: dict | None, faults: str = "", addopts: str = ""
) -> list[dict]:
    cmd = [sys.executable, "-m", "conformance.ci.rehearse",
           ".github/workflows/conformance-crcr.yml", "--event", event]  # fmt: skip
    if payload is not None:
        (repo.parent / "payload.json").write_text(json.dumps(payload))
        cmd += ["--event-payload", str(repo.parent / "payload.json")]
    extra = {"ECHO_NPU_FAULTS": faults} if faults else {}
    if addopts:  # reaches the workflow's pytest through the rehearsal's environment
        extra["PYTEST_ADDOPTS"] = addopts
    env = clean_env(extra)
    subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    calls = repo / "results" / "rehearsal" / "crcr-callbacks.jsonl"
    return [json.loads(line) for line in calls.read_text().splitlines()]


@pytest.mark.slow
def test_a_dispatched_pr_is_called_back_with_the_test_results(repo: Path) -> None:
    _seed(repo)
    started, ended = _rehearse(repo, "repository_dispatch", PR)
    assert started["workflow"]["status"] == "in_progress" and started["delivery_id"] == "d-1"
    assert ended["workflow"]["conclusion"] == "success"
    results = ended["workflow"]["test_results"]
    assert results["failed"] == 0 and results["passed"] > 100 and results["cells"] == ["crcr"]
    assert set(results) >= {"total", "passed", "failed", "skipped", "timeouts", "findings"}


@pytest.mark.slow
def test_a_failing_nightly_reports_itself_with_the_commit_it_tested(repo: Path) -> None:
    import torch

    _seed(repo)
    # the nightly runs the whole cell (no selection): narrowed here to the seed's ops by pytest's
    # own PYTEST_ADDOPTS, which the workflow's command does not see (a whole default run took 9
    # of the slow self-tests' 39 minutes on a slow machine, for a verdict this test never reads)
    (ended,) = _rehearse(repo, "schedule", None, "neg_signed_zero", "--ops neg,abs")
    assert ended["event_type"] == "nightly" and ended["delivery_id"] == torch.version.git_version
    assert ended["workflow"]["conclusion"] == "failure"
    failed = ended["workflow"]["failed_tests_detail"]
    assert failed and all("neg" in t["name"] and t["message"] for t in failed)
    assert ended["workflow"]["test_results"]["findings"] == 1
