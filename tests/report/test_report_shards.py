"""conformance/report/load.py merges the shards of one run (--shard K/N): the merged run is the
unsharded one; other sessions stay apart; clashing shards are one-line errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.report import render_markdown
from conformance.report.load import ReportError, load_durations, load_results, load_run
from conformance.report.versions import run_variant
from conformance.sharding import Partition, Shard, digest


def write_shards(
    full: Path, root: Path, count: int, name: str = "conformance-2.13", **meta: object
) -> list[Path]:
    """The cases of the results folder `full` split as `--shard k/count` runs would write them."""
    cases = [json.loads(line) for f in sorted(full.glob("cases-*.jsonl")) for line in f.open()]
    info = json.loads((full / "run.json").read_text())
    info.update({"environment": {"ECHO_NPU_ALLOCATOR": "guard"}, "checkers": []}, **meta)
    ids = [c["id"] for c in cases]
    part = Partition(count)
    assigned = part.assign(ids)
    out = []
    for index in range(1, count + 1):
        mine = [c for c, s in zip(cases, assigned, strict=True) if s == index - 1]
        folder = root / (name + Shard(index, count).suffix)
        folder.mkdir(parents=True)
        (folder / "cases-gw0.jsonl").write_text("".join(json.dumps(c) + "\n" for c in mine))
        shard = {"index": index, "count": count, "cases": len(mine), "total": len(ids)}
        shard.update({"case_list": digest(ids), "partition": part.last_digest})
        (folder / "run.json").write_text(json.dumps({**info, "shard": shard}))
        out.append(folder)
    return out


@pytest.fixture
def full(make_results: Callable[..., Path]) -> Path:
    return make_results("unsharded", "2.13.0", "guard")


def test_merged_shards_are_the_unsharded_run(full: Path, tmp_path: Path) -> None:
    write_shards(full, tmp_path / "nightly", 4)
    (run,) = load_results([tmp_path / "nightly"])
    alone = load_run(full)
    assert run.name == "conformance-2.13" and run_variant(run) == ""
    assert run.label == "conformance-2.13 (torch 2.13.0, guard, 4 of 4 shards)"
    assert run.warnings == [] and run.finished
    assert sorted((c.id, c.status) for c in run.cases) == sorted(
        (c.id, c.status) for c in alone.cases
    )
    assert [(f.id, f.count, f.ops) for f in run.findings()] == [
        (f.id, f.count, f.ops) for f in alone.findings()
    ]
    assert run.counts() == alone.counts()
    assert run.meta["shard"]["merged"] == [1, 2, 3, 4]
    assert run.meta["shard"]["cases"] == len(alone.cases) == run.meta["shard"]["total"]
    assert "findings" not in run.meta  # a shard's own findings are not the run's


def test_other_sessions_stay_apart(full: Path, tmp_path: Path) -> None:
    root = tmp_path / "nightly"
    write_shards(full, root, 2)
    write_shards(full, root, 2, "conformance-2.13-asan", checkers=["--asan"])
    write_shards(full, root, 2, "conformance-2.12", torch="2.12.1")
    write_shards(full, root, 2, "faulty", environment={"ECHO_NPU_FAULTS": "leak"})
    shutil.copytree(full, root / "plain")  # not sharded: a run of its own
    runs = load_results([root])
    assert [(r.name, len(r.cases)) for r in runs] == [
        ("conformance-2.12", 48),
        ("conformance-2.13-asan", 48),
        ("conformance-2.13", 48),
        ("faulty", 48),
        ("plain", 48),
    ]
    assert all(r.warnings == [] for r in runs)


def test_a_missing_shard_is_a_warning_on_the_run(full: Path, tmp_path: Path) -> None:
    folders = write_shards(full, tmp_path / "nightly", 3)
    shutil.rmtree(folders[1])
    (run,) = load_results([tmp_path / "nightly"])
    assert run.label.endswith("2 of 3 shards)")
    (warning,) = run.warnings
    assert warning.startswith("shard(s) 2 of 3 missing: ") and warning.endswith(" of 48 cases")
    assert f"⚠ {warning}" in render_markdown([run])


def test_clashing_shards_are_one_line_errors(full: Path, tmp_path: Path) -> None:
    root = tmp_path / "twice"
    first, _ = write_shards(full, root, 2)
    shutil.copytree(first, tmp_path / "copy" / first.name)
    with pytest.raises(ReportError, match=r"shard 1/2 given twice") as info:
        load_results([root, tmp_path / "copy"])
    assert "\n" not in str(info.value)

    root = tmp_path / "duplicate"
    first, second = write_shards(full, root, 2)
    line = (first / "cases-gw0.jsonl").read_text().splitlines()[0]
    with (second / "cases-gw0.jsonl").open("a") as f:
        f.write(line + "\n")
    with pytest.raises(ReportError, match=r"case test_matches_cpu\[.*\] recorded by two shards"):
        load_results([root])

    root = tmp_path / "partition"
    first, second = write_shards(full, root, 2)
    info = json.loads((second / "run.json").read_text())
    info["shard"]["partition"] = "another"
    (second / "run.json").write_text(json.dumps(info))
    with pytest.raises(ReportError, match="partitioned differently: run every shard with"):
        load_results([root])


def test_durations_of_a_folder_of_shards(full: Path, tmp_path: Path) -> None:
    write_shards(full, tmp_path / "nightly", 2)
    durations = load_durations(tmp_path / "nightly")
    assert durations == {c.id: c.duration for c in load_run(full).cases}
    with pytest.raises(ReportError, match="does not exist"):
        load_durations(tmp_path / "nope")


def test_a_lost_shard_never_reports_passing(tmp_path: Path, make_results) -> None:
    """Issue 32: three shards, the failing cases in shard 1; shards 2 and 3 alone merged:
    `--fail-on-failures` exits 1, the badge says incomplete, the scorecard says what was never
    seen (it said "passing" and "Every case passed")."""
    from conformance.report.__main__ import main
    from conformance.report.scorecard import build_scorecard

    full = make_results("unsharded", "2.13.0", "malloc")  # passing cases only in shards 2, 3
    folders = write_shards(full, tmp_path / "nightly", 3)
    bad = [f for f in folders if any(
        json.loads(line)["status"] in ("failed", "crashed", "xpassed")
        for line in (f / "cases-gw0.jsonl").open()
    )]  # fmt: skip
    for folder in bad:
        shutil.rmtree(folder)
    (run,) = load_results([tmp_path / "nightly"])
    assert not run.failures() and run.incomplete
    assert "never seen" in run.incomplete[0]
    card = build_scorecard([run])
    assert card.badge[0] == "incomplete run"
    assert main([str(tmp_path / "nightly"), "--fail-on-failures", "--markdown", "-"]) == 1


def test_a_not_run_case_fails_the_report(tmp_path: Path, make_results) -> None:
    from conformance.record import FAILING, Status
    from conformance.report.__main__ import main

    assert Status.NOT_RUN in FAILING
    folder = make_results("run", "2.13.0", "malloc")
    lines = (folder / "cases-gw0.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["status"] = (
            "passed" if row["status"] in ("failed", "crashed", "xpassed") else row["status"]
        )
    rows[0]["status"] = "not-run"
    (folder / "cases-gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gw1 = [json.loads(line) for line in (folder / "cases-gw1.jsonl").read_text().splitlines()]
    for row in gw1:
        row["status"] = (
            "passed" if row["status"] in ("failed", "crashed", "xpassed") else row["status"]
        )
    (folder / "cases-gw1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gw1))
    (run,) = load_results([folder])
    assert [c.status.value for c in run.failures()] == ["not-run"]
    assert main([str(folder), "--fail-on-failures", "--markdown", "-"]) == 1
