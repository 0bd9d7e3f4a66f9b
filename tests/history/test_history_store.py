"""The store itself on synthetic results: appending once, shards appending at once, schema
versions and migrations, bad input in one line, the flake rule's edges, the bisect range."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.history import schema
from conformance.history.__main__ import main
from conformance.history.store import Store
from tests.helpers import REPO, clean_env
from tests.history.conftest import Ask
from tests.history.synthetic import write_run


def _lines(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], list[str]]:
    out, err = capsys.readouterr()
    return out.splitlines(), err.splitlines()


def test_a_folder_is_appended_once(tmp_path, capsys) -> None:
    run = write_run(tmp_path / "a" / "conformance-2.13", {"abs-float32": "passed"})
    ask = Ask(str(tmp_path / "h.db"))
    ask.add(run)
    ask.add(run)
    out, _ = _lines(capsys)
    assert out[0].startswith("added") and out[1].startswith("already in the store, nothing added")
    assert len(ask("runs", capsys=capsys)) == 1


def test_bad_input_is_one_line_and_loses_nothing(tmp_path, capsys) -> None:
    good = write_run(tmp_path / "runs" / "good", {"abs-float32": "passed"})
    bad = tmp_path / "runs" / "bad"
    bad.mkdir()
    (bad / "cases-gw0.jsonl").write_text((good / "cases-gw0.jsonl").read_text())
    store = tmp_path / "h.db"
    assert main(["--store", str(store), "add", str(tmp_path / "runs")]) == 1
    out, err = _lines(capsys)
    assert [line for line in err if line.startswith("error")] == [
        f"error: {bad}: no run.json with a start time: not a run the store can date; run the "
        "suite with --results DIR (it writes run.json) or leave this folder out"
    ]
    assert len(out) == 1 and out[0].startswith(f"added {good}")
    with sqlite3.connect(store) as conn:  # a store of a newer schema: refused, untouched
        conn.execute("UPDATE store_info SET value = '99' WHERE key = 'schema_version'")
    before = store.read_bytes()
    assert main(["--store", str(store), "runs"]) == 2
    _, err = _lines(capsys)
    assert len(err) == 1 and "has schema 99, newer than this suite's" in err[0]
    assert store.read_bytes() == before


@pytest.mark.parametrize(
    "url, words",
    [
        ("postgresql://nobody@127.0.0.1:1/none", "cannot open the store postgresql"),
        ("nosuchdb://x/y", "no driver for it"),
    ],
)
def test_an_unusable_store_is_one_line(url, words, capsys) -> None:
    assert main(["--store", url, "runs"]) == 2
    out, err = _lines(capsys)
    assert out == [] and len(err) == 1 and words in err[0], err


def test_an_older_store_is_migrated(tmp_path, monkeypatch, capsys) -> None:
    """A store of schema 1 opened by a suite of schema 2 takes the migration step, once."""
    where = str(tmp_path / "h.db")
    Ask(where).add(write_run(tmp_path / "a" / "c", {"abs-float32": "passed"}))
    capsys.readouterr()
    steps = []

    def step(conn) -> None:
        steps.append(1)
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN note INTEGER")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(schema.MIGRATIONS, 1, step)
    Store(where).close()
    Store(where).close()
    assert steps == [1]
    with sqlite3.connect(where) as conn:
        assert conn.execute("SELECT value FROM store_info").fetchone() == ("2",)
        assert "note" in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]


def test_shards_appending_at_once_make_one_run(tmp_path, capsys) -> None:
    shards = [
        write_run(tmp_path / f"s{k}" / f"conformance-2.13-shard-{k}-of-2",
                  {f"op{k}-float32": "passed"}, shard=(k, 2))
        for k in (1, 2)
    ]  # fmt: skip
    where = str(tmp_path / "h.db")
    cmd = [sys.executable, "-m", "conformance.history", "--store", where, "add"]
    procs = [subprocess.Popen([*cmd, str(s)], cwd=REPO, env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in shards]  # fmt: skip
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    runs = Ask(where)("runs", capsys=capsys)
    assert (
        len(runs) == 1
        and sorted(runs[0]["shards"]) == [1, 2]
        and runs[0]["cell"] == "conformance-2.13"
    )


def test_a_flake_needs_one_configuration_within_the_window(tmp_path, capsys) -> None:
    ask = Ask(str(tmp_path / "h.db"))
    nights = [
        ("2026-09-01", {}, "failed"),  # 60 days before the last: expired by default
        ("2026-10-25", {"ECHO_NPU_FAULTS": "x"}, "failed"),  # another configuration
        ("2026-10-30", {}, "passed"),
        ("2026-10-31", {}, "passed"),
    ]
    for number, (day, env, status) in enumerate(nights):
        ask.add(write_run(tmp_path / f"n{number}" / "conformance-2.13",
                          {"abs-float32": status, "neg-float32": "passed"},
                          started=f"{day}T02:00:00+00:00", environment=env))  # fmt: skip
    capsys.readouterr()
    assert ask("flaky", capsys=capsys) == []
    (flake,) = ask("flaky", "--days", "90", capsys=capsys)
    assert flake["case"] == "test_matches_cpu[abs-float32-contiguous-native]"
    assert flake["statuses"] == ["failed", "passed", "passed"]


def test_the_bisect_range_comes_from_each_torch_latest_verdict(tmp_path, capsys) -> None:
    ask = Ask(str(tmp_path / "h.db"))
    for number, (torch, status) in enumerate(
        [("2.10.0", "passed"), ("2.11.0", "passed"), ("2.12.0", "failed"), ("2.13.0+cpu", "failed")]
    ):
        ask.add(write_run(tmp_path / f"t{number}" / f"conformance-{torch[:4]}",
                          {"abs-float32": status}, torch=torch,
                          started=f"2026-11-0{number + 1}T02:00:00+00:00"))  # fmt: skip
    capsys.readouterr()
    found = ask("bisect", "abs-float32-contiguous-native", capsys=capsys)
    assert (found["good"], found["bad"]) == ("2.11.0", "2.12.0")
    assert main(["--store", ask.where, "bisect", "abs-float32-contiguous-native"]) == 0
    out = capsys.readouterr().out
    assert (
        "python -m conformance.bisect 'test_matches_cpu[abs-float32-contiguous-native]' "
        "--good 2.11.0 --bad 2.12.0" in out
    )
    assert main(["--store", ask.where, "case", "abs"]) == 2  # in 4 cells: --cell names one
    assert "pick one with --cell" in capsys.readouterr().err
    json.dumps(found)


def test_pruning_keeps_run_times_and_findings_but_not_old_case_rows(tmp_path, capsys) -> None:
    where = tmp_path / "h.db"
    ask = Ask(str(where))
    for number, (day, status) in enumerate([("2026-03-01", "failed"), ("2026-11-01", "passed")]):
        cases = {f"op{k}-float32": status for k in range(300)}
        ask.add(write_run(tmp_path / f"n{number}" / "conformance-2.13", cases,
                          started=f"{day}T02:00:00+00:00"))  # fmt: skip
    capsys.readouterr()
    before = where.stat().st_size
    assert main(["--store", str(where), "prune", "--keep-days", "180"]) == 0
    assert "pruned the case rows of 1 run(s)" in capsys.readouterr().out
    assert where.stat().st_size < before
    line = ask("case", "op1-float32-contiguous-native", capsys=capsys)
    assert [status for _, status in line["points"]] == ["passed"]
    assert len(ask("times", capsys=capsys)) == 2
    finding = ask("finding", _first_finding(tmp_path / "n0" / "conformance-2.13"), capsys=capsys)
    assert [n for _, n in finding["counts"]] == [300, 0]
    summary = ask("summary", capsys=capsys)
    assert summary["conformance-2.13"]["changes"]["previous"] is None  # the old run is pruned


def _first_finding(run: Path) -> str:
    from conformance.report.load import load_run

    return load_run(run).findings()[0].id


@pytest.mark.parametrize(
    "nights, flaky",
    [
        # another allocator is another configuration, even in one results folder name
        ([("failed", "malloc"), ("passed", "guard")], False),
        # a manifest edit (failed -> xfailed) changes no behaviour
        ([("failed", "malloc"), ("xfailed", "malloc")], False),
        # an expected failure that sometimes passes is flaky
        ([("xfailed", "malloc"), ("xpassed", "malloc"), ("xfailed", "malloc")], True),
        # the suite's own error or a case not run is no evidence
        ([("error", "malloc"), ("passed", "malloc"), ("not-run", "malloc")], False),
    ],
)
def test_the_flake_rule_compares_behaviour_on_one_configuration(
    nights, flaky, tmp_path, capsys
) -> None:
    ask = Ask(str(tmp_path / "h.db"))
    for number, (status, allocator) in enumerate(nights):
        ask.add(write_run(tmp_path / f"n{number}" / "conformance-2.13", {"abs-float32": status},
                          started=f"2026-11-0{number + 1}T02:00:00+00:00",
                          allocator=allocator))  # fmt: skip
    capsys.readouterr()
    assert bool(ask("flaky", capsys=capsys)) is flaky


def test_a_finding_whose_cases_are_skipped_now_is_not_fixed(tmp_path, capsys) -> None:
    ask = Ask(str(tmp_path / "h.db"))
    for number, status in enumerate(["failed", "skipped"]):
        ask.add(write_run(tmp_path / f"n{number}" / "c", {"abs-float32": status},
                          started=f"2026-11-0{number + 1}T02:00:00+00:00"))  # fmt: skip
    capsys.readouterr()
    change = ask("changes", capsys=capsys)
    assert change["fixed"] == [] and len(change["unjudged"]) == 1
