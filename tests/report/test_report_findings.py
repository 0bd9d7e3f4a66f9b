"""Findings in the reports: failing cases grouped by root cause, blocked cases under their
foundation, unsupported and scenarios shown apart from the op grid."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.findings import group_findings
from conformance.record import CaseRecord, Status
from conformance.report.html import render_html
from conformance.report.load import load_results
from conformance.report.markdown import render_markdown


def _case(key: str, status: str, check: str | None = None, message: str = "", **extra) -> dict:
    op, dtype, layout, path = key.split("-")
    name, _, overload = op.partition(".")
    return {
        "id": f"test_matches_cpu[{key}]",
        "op": name,
        "overload": overload or "default",
        "dtype": dtype,
        "layout": layout,
        "path": path,
        "status": status,
        "check": check,
        "message": message,
        "repro": f"pytest -k {key}",
        **extra,
    }


BROKEN_COPY = [
    _case("_copy_from-float32-offset-native", "failed", "values", "[values] dst: 3/30 differ"),
    _case("_copy_from-float64-offset-native", "failed", "values", "[values] output: 9/30 differ"),
    *(
        _case(
            f"{op}-float32-offset-fallback",
            "blocked",
            "values",
            "[blocked] blocked by _copy_from-float32-offset-native: ...",
            blocked_by="_copy_from-float32-offset-native",
            blocked_by_message="device->host copy of the offset view: 119/120 elements wrong",
        )
        for op in ("abs", "add.Tensor", "sum.dim_IntList")
    ),
    _case("mul.Tensor-float32-contiguous-native", "failed", "leak", "[leak] 1 device block(s)"),
    _case("mul.Tensor-float64-contiguous-native", "failed", "leak", "[leak] 2 device block(s)"),
    _case("exp_-int64-contiguous-native", "unsupported", "error", "[unsupported] device raised"),
    _case(
        "sum.dim_IntList-float32-zero_size-native",
        "crashed",
        "crash",
        "[crash] the process killed by SIGSEGV while running this case",
    ),
    _case(
        "neg-float32-zero_size-native",
        "crashed",
        "crash",
        "[crash] the process killed by SIGSEGV while running this case",
    ),
    _case("abs-float32-contiguous-native", "passed"),
    _case("abs-float32-transposed-native", "skipped", message="no sample"),
    {
        "id": "test_save_load.py::test_save_load_tensors",
        "op": "scenario",
        "overload": "test_save_load_tensors",
        "dtype": "-",
        "layout": "-",
        "path": "scenario",
        "status": "failed",
        "check": "scenario",
        "message": "AssertionError: before save: base",
    },
]


def _results(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    root.mkdir()
    (root / "run.json").write_text(json.dumps({"torch": "2.13.0", "finished": "now"}))
    (root / "cases-main.jsonl").write_text("\n".join(json.dumps(c) for c in BROKEN_COPY))
    return root


def test_one_broken_foundation_is_one_finding():
    findings = group_findings(CaseRecord.from_json(c) for c in BROKEN_COPY)
    titles = [f.title for f in findings]
    root = findings[0]
    assert root.title.startswith("_copy_from is broken") and root.count == 5 and root.blocked == 3
    assert root.representative.id == "test_matches_cpu[_copy_from-float32-offset-native]"
    assert len(findings) == 4, titles  # _copy_from, the leak, one crash signature, the scenario
    crash = next(f for f in findings if f.key.check == "crash")
    assert crash.count == 2 and "segfault" in crash.title  # the same crash in two ops
    assert not any("exp_" in t for t in titles)  # unsupported is not a failure


def test_reports_show_findings_unsupported_and_scenarios(tmp_path):
    runs = load_results([_results(tmp_path)])
    md = render_markdown(runs)
    assert "## Findings (one per root cause)" in md
    assert "10 failing cases = 4 findings" in md
    assert "🚫 unsupported" in md and "`exp_` (1)" in md
    assert "## Scenarios" in md and "test_save_load_tensors" in md
    html = render_html(runs)
    assert "Findings: one per root cause" in html and "_copy_from is broken" in html
    assert 'class="badge s-unsupported"' in html
    assert "s-blocked" in html
    # scenarios are listed, not put into the op grid
    assert 'data-op="scenario.test_save_load_tensors"' not in html.split("<h2>Grid")[1]
    assert Status.BLOCKED.value in md


def test_unsupported_and_skipped_do_not_look_like_passed(tmp_path):
    import re

    html = render_html(load_results([_results(tmp_path)]))

    def background(status: str) -> str:
        found = re.search(rf"\.s-{status} \{{ background: ([^;]+);", html)
        assert found, status
        return found.group(1)

    looks = {s: background(s) for s in ("passed", "skipped", "unsupported", "blocked", "failed")}
    assert len(set(looks.values())) == len(looks), looks
    assert "gradient" in looks["skipped"] and "gradient" in looks["unsupported"]  # patterned
