"""The reports give each family of cases besides the op cases a section of its own (the grid
holds op cases alone: it showed `contract.event-elapsed-time` and `all_reduce.SUM` as ops), and
a missing shard's unseen cases count the families' cases too."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.report import render_markdown
from conformance.report.html import render_html
from conformance.report.load import load_results, load_run
from conformance.report.summary import build_grid
from tests.report.test_report_shards import write_shards

FAMILY_LINES = [
    {"id": "test_event_elapsed_time", "status": "failed", "op": "contract",
     "overload": "event-elapsed-time", "path": "contract", "check": "contract",
     "message": "[contract event-elapsed-time] 0.0 ms"},
    {"id": "test_collective[all_reduce-SUM-float32-4-contiguous-w2-sync]", "status": "passed",
     "op": "all_reduce", "overload": "SUM", "dtype": "float32", "layout": "contiguous",
     "path": "collectives"},
    {"id": "test_attention_mask_pipeline[x]", "status": "passed", "op": "scenario",
     "overload": "test_attention_mask_pipeline[x]", "path": "scenario"},
]  # fmt: skip


def with_families(folder: Path) -> Path:
    """The results folder with one case of each family besides the op cases (records of a
    suite that wrote no `family` field: derived from `path`)."""
    text = "".join(json.dumps(line) + "\n" for line in FAMILY_LINES)
    (folder / "cases-gw9.jsonl").write_text(text)
    return folder


def test_the_grid_holds_op_cases_and_each_family_has_a_section(make_results, tmp_path):
    run = load_run(with_families(make_results()))
    assert set(run.family_cases()) == {"contract", "collectives", "scenarios"}
    grid = build_grid(run)
    assert not {"contract.event-elapsed-time", "all_reduce.SUM", "scenario"} & set(grid.ops)
    md = render_markdown([run])
    for title in ("## Contract (1)", "## Collectives (1)", "## Scenarios (1)"):
        assert title in md, md
    assert "`test_event_elapsed_time`" in md
    html = render_html([run])
    assert 'id="family-contract"' in html and 'id="family-collectives"' in html


def test_a_missing_shard_counts_the_families_cases_it_held(make_results, tmp_path):
    full = with_families(make_results("unsharded", "2.13.0", "malloc"))
    folders = write_shards(full, tmp_path / "nightly", 2)
    ops = sum(1 for f in full.glob("cases-gw[01].jsonl") for _ in f.open())
    for folder in folders:  # a suite that counts the families' cases in its shard account
        info = json.loads((folder / "run.json").read_text())
        info["shard"].update(total=ops, family_total=len(FAMILY_LINES))
        (folder / "run.json").write_text(json.dumps(info))
    lost = sum(1 for _ in (folders[1] / "cases-gw0.jsonl").open())
    (folders[1] / "cases-gw0.jsonl").unlink()
    (folders[1] / "run.json").unlink()
    (run,) = load_results([tmp_path / "nightly"])
    assert f"{lost} case(s) never seen" in run.incomplete[0], run.incomplete
