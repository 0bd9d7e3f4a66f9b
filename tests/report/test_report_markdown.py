"""conformance/report/markdown.py and the `python -m conformance.report` command line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conformance.report.load import load_results
from conformance.report.markdown import render_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_markdown_counts_and_failures_first(make_results: Callable[..., Path]) -> None:
    md = render_markdown(load_results([make_results()]))
    lines = md.splitlines()
    assert lines[0] == "# Conformance report"
    # overview row: passed, failed, blocked, unsupported, torch-bug, xfailed, xpassed, crashed,
    # hung, error, skipped, total, finished
    row = next(ln for ln in lines if ln.startswith("| conformance-2.8-guard |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[1:4] == ["2.8.0", "guard", "echo_npu"]
    assert cols[4:] == ["39", "2", "", "", "", "3", "1", "1", "", "", "", "2", "48", "yes"]
    # failures come before the count tables, crashes first
    fail_at = md.index("## Failures")
    assert fail_at < md.index("### Per layout") < md.index("### Per op")
    failures = md[fail_at : md.index("### Per layout")]
    assert failures.index("crashed") < failures.index("failed")
    assert "Segmentation fault" in failures
    assert "`pytest conformance -k 'masked_fill_.Scalar-float32-transposed-native'`" in failures
    # pipe escaped, and "<...>" (findings' "<op>", "<n>" would be read as HTML tags)
    assert "red zone after block \\| byte 4 &lt;masked_fill_&gt;" in failures
    # per layout: transposed has the two masked_fill_ failures
    layout_row = next(ln for ln in lines if ln.startswith("| transposed |"))
    assert [c.strip() for c in layout_row.strip("|").split("|")][2] == "2"
    # problem ops listed, then the full table
    assert "| sum.dim_IntList |" in md and "<details><summary>All 4 ops</summary>" in md


def test_markdown_several_sessions(make_results: Callable[..., Path]) -> None:
    a = make_results("conformance-2.8-guard", "2.8.0", "guard", truncate=True, finished=False)
    make_results("conformance-2.13", "2.13.0", "malloc")
    md = render_markdown(load_results([a.parent]))
    assert "## conformance-2.13 (torch 2.13.0, malloc)" in md
    assert "## conformance-2.8-guard (torch 2.8.0, guard)" in md
    assert "truncated last line" in md
    assert "| **no** |" in md  # the unfinished run


def test_cli_writes_both_reports_and_step_summary(
    make_results: Callable[..., Path], tmp_path: Path
) -> None:
    res = make_results(truncate=True)
    summary = tmp_path / "summary.md"
    summary.write_text("before\n", encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.report",
            str(res.parent),
            "--markdown",
            str(tmp_path / "o.md"),
            "--html",
            str(tmp_path / "o.html"),
            "--step-summary",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"GITHUB_STEP_SUMMARY": str(summary), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "truncated last line" in proc.stderr
    md = (tmp_path / "o.md").read_text(encoding="utf-8")
    assert summary.read_text(encoding="utf-8") == "before\n" + md
    assert (tmp_path / "o.html").read_text(encoding="utf-8").startswith("<!doctype html>")


def test_cli_errors_and_help(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.report", str(tmp_path / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "conformance.report", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.returncode == 0
    for word in ("RESULTS_DIR", "--markdown", "--html", "run.json", "GITHUB_STEP_SUMMARY"):
        assert word in helped.stdout


def test_markdown_counts_the_modes_per_axis(tmp_path: Path) -> None:
    import json

    from tests.report.report_fixtures import make_case

    out = tmp_path / "run"
    out.mkdir()
    cases = [
        make_case("gelu", "default", "float32", "contiguous", "native", status="passed"),
        {
            **make_case("gelu", "default", "float32", "contiguous", "native", status="failed"),
            "id": "test_matches_cpu[gelu-float32-contiguous-native-grad]",
            "values": "grad",
            "check": "grad",
        },
        {
            **make_case("add", "out", "float32", "contiguous", "native", status="passed"),
            "values": "inference",
        },
    ]
    (out / "cases-main.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (out / "run.json").write_text(json.dumps({"torch": "2.13.0", "backend": "echo_npu"}))
    md = render_markdown(load_results([out]))
    assert "### Per axis" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| grad |"))
    assert [c.strip() for c in row.strip("|").split("|")][1:3] == ["", "1"]  # 1 failed
    assert "| inference |" in md and "| ordinary |" in md
