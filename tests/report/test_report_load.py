"""conformance/report/load.py: results folders, several sessions, truncated lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from report_fixtures import DTYPES, LAYOUTS, OPS, PATHS

from conformance.report.load import ReportError, load_results, load_run, worst_status

N_CASES = len(OPS) * len(DTYPES) * len(LAYOUTS) * len(PATHS)


def test_load_one_run(make_results: Callable[..., Path]) -> None:
    run = load_run(make_results())
    assert len(run.cases) == N_CASES
    assert run.torch == "2.8.0" and run.allocator == "guard" and run.backend == "echo_npu"
    assert run.finished and run.warnings == []
    counts = run.counts()
    assert counts["crashed"] == 1 and counts["failed"] == 2 and counts["xpassed"] == 1
    assert [c.status for c in run.failures()][:1] == ["crashed"]
    assert {c.op_name for c in run.cases} == {
        "masked_fill_.Scalar",
        "add.Tensor",
        "abs",
        "sum.dim_IntList",
    }


def test_truncated_last_line_is_skipped_with_a_warning(make_results: Callable[..., Path]) -> None:
    run = load_run(make_results(truncate=True, finished=False))
    assert len(run.cases) == N_CASES
    assert any("truncated last line" in w for w in run.warnings)
    assert any("did not finish" in w for w in run.warnings)


def test_parent_folder_holds_several_sessions(make_results: Callable[..., Path]) -> None:
    a = make_results("conformance-2.8-guard", "2.8.0", "guard")
    make_results("conformance-2.13", "2.13.0", "malloc")
    runs = load_results([a.parent])
    assert [(r.name, r.torch, r.allocator) for r in runs] == [
        ("conformance-2.13", "2.13.0", "malloc"),
        ("conformance-2.8-guard", "2.8.0", "guard"),
    ]
    assert len(load_results([a, a])) == 2


def test_missing_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        load_results([tmp_path / "nope"])
    with pytest.raises(ReportError, match="no results in"):
        load_results([tmp_path])


def test_worst_status() -> None:
    assert worst_status(["passed", "xfailed", "failed"]) == "failed"
    assert worst_status(["passed", "skipped"]) == "passed"
    assert worst_status(["weird"]) == "error"
    assert worst_status([]) == "skipped"


def test_session_subfolders_win_over_loose_files(make_results: Callable[..., Path]) -> None:
    a = make_results("conformance-2.8-guard")
    parent = a.parent
    (parent / "run.json").write_text('{"torch": "2.13.0"}', encoding="utf-8")
    (parent / "cases-main.jsonl").write_text("", encoding="utf-8")
    assert [r.name for r in load_results([parent])] == ["conformance-2.8-guard"]
