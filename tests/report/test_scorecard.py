"""conformance/report/scorecard.py: the page and the badge a backend repository publishes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from report_fixtures import make_case

from conformance.report.__main__ import main
from conformance.report.load import load_results
from conformance.report.scorecard import build_scorecard, render_badge, render_scorecard

COVERAGE = {
    "registered": ["masked_fill_.Scalar", "add.Tensor", "abs", "sum.dim_IntList", "neg"],
    "tested": ["masked_fill_.Scalar", "add.Tensor", "abs", "sum.dim_IntList"],
    "fallback_tested": ["nonzero"],
    "models": ["add.Tensor", "abs", "nonzero", "addmm"],
}


def _session(make_results, name: str, torch: str, allocator: str, extra: list[dict] = ()):
    folder = make_results(name, torch=torch, allocator=allocator)
    meta = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**meta, "coverage": COVERAGE}))
    with (folder / "cases-gw0.jsonl").open("a") as f:
        for case in extra:
            f.write(json.dumps({**case, "torch": torch, "allocator": allocator}) + "\n")
    return folder


def _unsupported(op: str, dtype: str, declared: bool) -> dict:
    return make_case(
        op, "default", dtype, "contiguous", "native",
        status="unsupported" if declared else "failed",
        check="unsupported",
        message="[unsupported] device raised NotImplementedError [not_implemented]: "
        f"\"{op}_npu\" not implemented for '{dtype}' where cpu computes",
        **({"expected_by": "m.toml:3", "category": "unsupported"} if declared else {}),
    )  # fmt: skip


def test_the_page_says_what_was_tested_found_and_lacking(make_results, tmp_path):
    old = _session(make_results, "conformance-2.8", "2.8.0", "malloc")
    new = _session(
        make_results, "conformance-2.9-guard", "2.9.0", "guard",
        [_unsupported("exp", "int64", declared=True), _unsupported("exp", "bool", False)],
    )  # fmt: skip
    card = build_scorecard(load_results([old, new]), report="../report.html")
    assert card.registered == (4, 5) and card.models == (3, 4)
    assert card.torch_versions == ["2.8.0", "2.9.0"] and card.allocators == ["guard", "malloc"]
    first_bad = {row.finding.key.check: row.first_bad for row in card.new}
    assert first_bad["memory"] == "2.9.0"  # masked_fill_ fails under guard, on 2.9 only
    assert first_bad["crash"] == "2.8.0 or earlier"  # fails on the oldest version run
    assert first_bad["unsupported"] == "2.9.0"
    assert card.unsupported == {"exp": {"bool": "failing", "int64": "declared"}}
    assert [r.category for r in card.known] == ["backend-bug"]  # the xfailed abs cases
    page = render_scorecard(card, "today")
    assert "| registered overloads tested | 4 of 5 (80%) |" in page
    assert "3 of 4 overloads (75%)" in page
    assert "| backend-bug | 3 | 6 | 1 | 6 |" in page  # new: memory, crash, xpassed; known
    assert "| unsupported | 1 | 1 |  |  |" in page
    assert "](../report.html#F" in page  # findings link to the HTML report
    assert "`pytest conformance -k 'masked_fill_.Scalar-float32-transposed-native'`" in page
    assert "| masked_fill_.Scalar | backend-bug | 2 | 2.9.0 |" in page  # ops, category, first bad
    assert "<masked_fill_>" not in page and "&lt;" in page  # "<op>" is no HTML tag
    assert "| `exp` | **undeclared** | declared |" in page  # dtypes bool, int64
    text, colour = card.badge
    assert text == f"{len(card.new)} findings" and colour == "#e05d44"


def test_the_badge_is_an_svg_that_says_passing_or_how_many_findings(make_results):
    clean = make_results("conformance-2.9", torch="2.9.0", allocator="malloc")
    for f in clean.glob("cases-*.jsonl"):  # only passes
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        f.write_text("".join(json.dumps({**r, "status": "passed"}) + "\n" for r in rows))
    meta = json.loads((clean / "run.json").read_text())
    (clean / "run.json").write_text(json.dumps({**meta, "coverage": COVERAGE}))
    card = build_scorecard(load_results([clean]))
    svg = ET.fromstring(render_badge(card))
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert texts[-1] == "passing, 4/5 ops" and "**Every case passed" in render_scorecard(card)
    unfinished = make_results("conformance-2.10", torch="2.10.0", finished=False)
    assert build_scorecard(load_results([unfinished])).badge == ("incomplete run", "#dfb317")


def test_command_line_writes_page_and_badge_and_reads_bisect_results(make_results, tmp_path):
    folder = make_results("conformance-2.9-guard", torch="2.9.0", allocator="guard")
    bisect = tmp_path / "bisect.json"
    case = "masked_fill_.Scalar-float32-transposed-native"
    bisect.write_text(json.dumps({"expression": case, "first_bad": "2.7.0", "answer": "2.7.0"}))
    out = tmp_path / "site"
    assert main([str(folder), "--scorecard", str(out), "--bisect", str(bisect)]) == 0
    page = (out / "scorecard.md").read_text()
    assert "| 2.7.0 (bisect) |" in page and "![conformance: " in page
    assert (out / "badge.svg").read_text().startswith("<svg")
    assert not Path("report.md").exists()  # --scorecard alone prints no Markdown report
