"""`report --crcr FILE`: the relay's test-results summary and failed-tests-detail, capped as the
relay caps them (1,000 tests, 1 KB a message) and small enough to travel as a step output."""

from __future__ import annotations

import json

from conformance.report.__main__ import main
from conformance.report.crcr import MAX_BYTES, MAX_FAILED, MESSAGE_BYTES
from tests.history.synthetic import write_run


def test_the_summary_and_the_failed_tests_are_capped(tmp_path, monkeypatch) -> None:
    cases = {f"op{k}-float32": "failed" for k in range(1500)} | {"abs-float32": "passed"}
    run = write_run(tmp_path / "r" / "crcr", cases)
    lines = (run / "cases-gw0.jsonl").read_text().splitlines()
    long = json.loads(lines[0]) | {"message": "x" * 5000}
    (run / "cases-gw0.jsonl").write_text("\n".join([json.dumps(long), *lines[1:]]) + "\n")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "me/my-npu")
    monkeypatch.setenv("GITHUB_RUN_ID", "77")
    assert main([str(run), "--crcr", str(tmp_path / "crcr.json")]) == 0
    summary = json.loads((tmp_path / "crcr.json").read_text())
    assert (summary["total"], summary["passed"], summary["failed"]) == (1501, 1, 1500)
    assert summary["run_url"] == "https://github.com/me/my-npu/actions/runs/77"
    assert summary["findings"] >= 1 and len(summary["findings_listed"]) <= 20
    text = (tmp_path / "crcr-failed.json").read_text()
    failed = json.loads(text)
    assert 0 < len(failed) <= MAX_FAILED and len(text) <= MAX_BYTES
    assert all(len(t["message"].encode()) <= MESSAGE_BYTES for t in failed)
    assert max(len(t["message"]) for t in failed) > 900  # the long one, clipped
