"""The autocast family (conformance/autocast, docs/AUTOCAST.md) in a run: on echo_npu (CUDA's
policy) it is green and every policy record carries its row of the policy table, which the
Markdown report draws; with matmul left in float32 the matmul case fails and it is one finding;
on pyreg_npu (no AutocastPrivateUse1 kernel, no get_amp_supported_dtype) every op whose class
differs fails as one finding that says so, and the contract case names the missing function."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, clean_env, run_pytest

FAMILY = "conformance/autocast"
PICKED = "mm or matmul or softmax or dot or exp or cholesky or amp or region"


def autocast_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    """The family alone: (process, records by case, run.json, results folder)."""
    results = tmp_path / f"results-{len(list(tmp_path.iterdir()))}"
    proc = run_pytest(FAMILY, "--results", str(results), "-k", PICKED, *args, env=env)
    rows = []
    for f in sorted(results.glob("cases-*.jsonl")) if results.exists() else []:
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    info = json.loads((results / "run.json").read_text()) if results.exists() else {}
    return proc, {r["autocast_case"]: r for r in rows}, info, results


def test_echo_npu_follows_cuda_and_the_report_draws_the_table(tmp_path):
    proc, records, info, results = autocast_run(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "autocast: the device's policy (AutocastPrivateUse1: " in out, out[:3000]
    assert {"mm", "matmul", "softmax", "test_amp_supported_dtype"} <= set(records)
    assert {r["status"] for r in records.values()} <= {"passed", "skipped"}, records
    assert records["mm"]["status"] == records["test_amp_supported_dtype"]["status"] == "passed"
    mm = records["mm"]
    assert mm["table"] == {"op": "mm", "cuda": "lower", "cpu": "lower", "device": "lower"}, mm
    assert records["softmax"]["table"]["device"] == "fp32"
    report = tmp_path / "report.md"
    subprocess.run(
        [sys.executable, "-m", "conformance.report", str(results), "--markdown", str(report),
         "--html", str(report.with_suffix(".html"))],
        cwd=REPO, env=clean_env(), check=True, capture_output=True,
    )  # fmt: skip
    text = report.read_text()
    assert "| session | op | cuda | cpu | device |" in text, text[-3000:]
    assert "| mm | lower | lower | lower |" in text
    html = report.with_suffix(".html").read_text()
    assert 'id="table-autocast"' in html and "<td>mm</td><td>lower</td>" in html


def test_matmul_in_float32_is_one_finding(tmp_path):
    proc, records, info, _ = autocast_run(tmp_path, env={"ECHO_NPU_FAULTS": "autocast_matmul_fp32"})
    assert proc.returncode != 0
    failed = sorted(c for c, r in records.items() if r["status"] == "failed")
    assert failed == ["matmul"], failed
    assert records["matmul"]["check"] == "autocast"
    assert records["matmul"]["message"].startswith("[autocast lower] matmul: CUDA's policy")
    findings = [f for f in info["findings"] if f["count"]]
    assert len(findings) == 1 and findings[0]["count"] == 1, findings


def test_a_device_without_autocast_kernels_is_one_finding(tmp_path):
    env = {"PYTHONPATH": str(REPO / "tests" / "backends")}
    proc, records, info, _ = autocast_run(
        tmp_path, "--backend", "pyreg_npu:register_devices", env=env
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    policy = [r for c, r in records.items() if r["status"] == "failed" and r["op"] != "autocast"]
    assert policy and all("registers no autocast kernel" in r["message"] for r in policy), policy
    # the policy table shows CUDA's and CPU's classes beside the refusal
    assert records["mm"]["table"] == {
        "op": "mm",
        "cuda": "lower",
        "cpu": "lower",
        "device": "refused",
    }
    amp = records["test_amp_supported_dtype"]
    assert amp["status"] == "failed" and "get_amp_supported_dtype" in amp["message"], amp
    titles = [f["title"] for f in info["findings"] if "registers no autocast kernel" in f["title"]]
    assert len(titles) == 1, [f["title"] for f in info["findings"]]
