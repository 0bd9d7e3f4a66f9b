"""The local rehearsal runs the nightly workflow file itself (jobs, matrix from the sessions job,
artifacts, the report job) against a project whose nox cells are fakes that write results."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from conformance.ci.rehearse import Rehearsal, RehearsalError, main
from conformance.ci.templates import user_nightly

pytest.importorskip("nox")
pytest.importorskip("yaml")

NOXFILE = '''
"""Fake cells: each writes one run (8 cases; 2.13 fails 5 of them the same way), or its part of
them as the suite's --shard does ($CONFORMANCE_SHARD, set by the nightly's jobs)."""
import json, os, pathlib, sys
import nox
from conformance.ci.sessions import append_history
from conformance.sharding import Partition, Shard, digest

ROOT = pathlib.Path(__file__).resolve().parent


def cell(minor, version, failing):
    def run(session):
        shard = Shard.parse(os.environ.get("CONFORMANCE_SHARD") or "1/1")
        out = ROOT / "results" / f"conformance-{minor}{shard.suffix}"
        out.mkdir(parents=True, exist_ok=True)
        ids = [f"test_matches_cpu[op{i}.Tensor-float32-transposed-native]" for i in range(8)]
        part = Partition(shard.count)
        mine = [s == shard.index - 1 for s in part.assign(ids)]
        meta = {"index": shard.index, "count": shard.count, "cases": sum(mine), "total": 8}
        meta.update(case_list=digest(ids), partition=part.last_digest)
        info = {"torch": version, "started": "2026-11-30T02:00:00+00:00", "finished": "t",
                "shard": meta}
        (out / "run.json").write_text(json.dumps(info))
        lines = []
        for i in range(8):
            if not mine[i]:
                continue
            bad = failing and i < 5
            lines.append(json.dumps({
                "id": f"test_matches_cpu[op{i}.Tensor-float32-transposed-native]",
                "op": f"op{i}", "overload": "Tensor", "dtype": "float32",
                "layout": "transposed", "path": "native",
                "status": "failed" if bad else "passed", "check": "strides" if bad else None,
                "message": f"output: strides ({i + 1}, 1) on the device, cpu (1, {i + 2})"
                if bad else None,
                "repro": f"pytest conformance -k op{i}",
            }))
        (out / "cases-main.jsonl").write_text("\\n".join(lines) + "\\n")
        if os.environ.get("FAIL_CELL") == minor:
            session.error("this cell fails")
    run.__doc__ = f"fake cell {minor}"
    nox.session(name=f"conformance-{minor}", venv_backend="none", tags=["conformance"])(run)


cell("2.11", "2.11.0", False)
cell("2.12", "2.12.1", False)
cell("2.13", "2.13.0", True)


@nox.session(venv_backend="none")
def report(session):
    """The report over results/ (host python), with the real session's results store."""
    trends = append_history(session, ["results"], ROOT, ROOT / "results")
    session.run(sys.executable, "-m", "conformance.report", "results",
                "--markdown", "results/report.md", "--html", "results/report.html",
                "--versions-md", "results/versions.md", "--versions-html", "results/versions.html",
                "--scorecard", "results/scorecard", *trends, external=True)
'''


MATRIX = """schema = 2
[torch]
[[torch.release]]
minor = "2.13"
version = "2.13.0"
[backend]
module = "mynpu"
[backend.build]
source = "."
command = "true"
[nightly]
shards = 2
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "mynpu"
    flows = root / ".github" / "workflows"
    flows.mkdir(parents=True)
    (flows / "conformance-nightly.yml").write_text(user_nightly("mynpu", "m.toml"))
    (root / "noxfile.py").write_text(NOXFILE)
    (root / "m.toml").write_text(MATRIX)
    suite = str(Path(__file__).resolve().parents[2])  # the fake noxfile imports conformance
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [suite, os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.delenv("CONFORMANCE_MATRIX", raising=False)
    return root


def _run(project: Path, *args: str) -> int:
    flow = project / ".github" / "workflows" / "conformance-nightly.yml"
    return main([str(flow), "--root", str(project), *args])


def test_rehearsal_runs_the_nightly_jobs_and_builds_the_version_report(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(project, "--sessions", "conformance-2.12,conformance-2.13") == 0
    out = project / "results" / "rehearsal"
    data = json.loads((out / "rehearsal.json").read_text())
    assert [(j["label"], j["result"]) for j in data["jobs"]] == [
        ("sessions", "success"),
        ("conformance (conformance-2.12, 1-of-2)", "success"),  # [nightly].shards of m.toml
        ("conformance (conformance-2.12, 2-of-2)", "success"),
        ("conformance (conformance-2.13, 1-of-2)", "success"),
        ("conformance (conformance-2.13, 2-of-2)", "success"),
        ("mutants", "skipped"),  # scheduled nights or `mutants: true` (an hour of campaign)
        ("report", "success"),
    ]
    assert data["inputs"] == {
        "filter": "^(conformance\\-2\\.12|conformance\\-2\\.13)$",
        "shards": "",
        "mutants": False,
    }
    assert data["artifacts"] == [
        "conformance-2.12-shard-1-of-2",
        "conformance-2.12-shard-2-of-2",
        "conformance-2.13-shard-1-of-2",
        "conformance-2.13-shard-2-of-2",
        "nightly-history",
        "nightly-results",
        "report",
    ]
    art = out / "artifacts"
    # the results store travels to the next nightly; its summary is in the report
    assert (art / "nightly-history" / "history.db").is_file()
    history = (art / "report" / "history.md").read_text()
    assert "# Results over time: 2 run(s) in the store" in history, history
    assert "## Failing in the latest run of conformance-2.13: 5 case(s)" in history
    assert 'alt="conformance-2.13: pass rate"' in (art / "report" / "report.html").read_text()
    card = (art / "report" / "scorecard" / "scorecard.md").read_text()
    assert "(trends/conformance-2.13-run-time.svg)" in card
    assert (art / "report" / "scorecard" / "trends" / "conformance-2.13-run-time.svg").is_file()
    # v4 layout: no parent dirs
    assert (art / "conformance-2.13-shard-2-of-2" / "cases-main.jsonl").is_file()
    assert (art / "nightly-results" / "conformance-2.12-shard-1-of-2" / "run.json").is_file()
    versions = (art / "report" / "versions.md").read_text()
    # the shards of a cell merged: one finding of 5 cases, not five rows or two half findings
    assert "**first fails in 2.13.0 (5 cases)**" in versions
    assert "Findings across versions: 1" in versions
    summary = (out / "summary.md").read_text()
    assert "Findings across versions: 1" in summary
    # the scorecard leads the job summary and ships with its badge in the report artifact
    assert summary.index("# Conformance scorecard: ") < summary.index("Findings across versions")
    assert "| first bad torch |" in summary and "| 5 | 2.13.0 |" in summary  # cases, first bad
    assert (art / "report" / "scorecard" / "badge.svg").read_text().startswith("<svg")
    log = capsys.readouterr().out
    assert "Install nox: skipped" in log  # `if: ${{ !env.ACT }}`
    assert "Previous nightly's results (for new failures / new passes): skipped" in log
    assert not (project / ".nox" / "rehearsal" / "work").exists() or not any(
        (project / ".nox" / "rehearsal" / "work").iterdir()
    )  # workspaces are removed


def test_four_shards_per_cell_report_what_one_does(project: Path) -> None:
    assert _run(project, "--sessions", "conformance-2.13", "--input", "shards=4") == 0
    data = json.loads((project / "results" / "rehearsal" / "rehearsal.json").read_text())
    labels = [j["label"] for j in data["jobs"] if j["job"] == "conformance"]
    assert labels == [f"conformance (conformance-2.13, {k}-of-4)" for k in range(1, 5)]
    report = project / "results" / "rehearsal" / "artifacts" / "report"
    assert "Findings across versions: 1" in (report / "versions.md").read_text()
    merged = "conformance-2.13 (torch 2.13.0, ?, 4 of 4 shards): 5 failing cases = 1 findings"
    assert merged in (report / "report.md").read_text()


def test_one_folder_matched_by_a_wildcard_keeps_its_name_in_the_artifact(project: Path) -> None:
    """upload-artifact keeps the hierarchy after a path's first wildcard: `results/conformance-*`
    matching one folder uploads that folder, not its contents (the report names the run by it)."""
    assert _run(project, "--sessions", "conformance-2.13", "--input", "shards=1") == 0
    art = project / "results" / "rehearsal" / "artifacts"
    assert (art / "nightly-results" / "conformance-2.13-shard-1-of-1" / "run.json").is_file()
    assert (art / "conformance-2.13-shard-1-of-1" / "run.json").is_file()  # a plain path: its files


def test_failing_cell_fails_the_rehearsal_but_the_report_still_runs(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_CELL", "2.12")
    assert _run(project, "--sessions", "conformance-2.12,conformance-2.13") == 1
    data = json.loads((project / "results" / "rehearsal" / "rehearsal.json").read_text())
    results = {j["label"]: j["result"] for j in data["jobs"]}
    assert results["conformance (conformance-2.12, 1-of-2)"] == "failure"
    assert results["report"] == "success"  # if: always()
    assert "conformance-2.12-shard-1-of-2" in data["artifacts"]  # uploaded although it failed


def test_filter_that_matches_nothing_fails_the_sessions_job(project: Path) -> None:
    assert _run(project, "--input", "filter=^nothing$") == 1
    data = json.loads((project / "results" / "rehearsal" / "rehearsal.json").read_text())
    assert [j["result"] for j in data["jobs"]][:2] == ["failure", "skipped"]


def test_unknown_input_and_unknown_action_are_errors(project: Path, tmp_path: Path) -> None:
    assert _run(project, "--input", "nope=1") == 2
    flow = tmp_path / "other.yml"
    flow.write_text(
        textwrap.dedent(
            """
            on: push
            jobs:
              a:
                runs-on: ubuntu-latest
                steps:
                  - uses: docker/login-action@v3
                  - run: echo next
            """
        )
    )
    rehearsal = Rehearsal(flow, project, echo=False)
    assert rehearsal.run() == 1
    assert rehearsal.results[0].failed_step == "docker/login-action@v3"
    with pytest.raises(RehearsalError, match="not found"):
        Rehearsal(tmp_path / "missing.yml", project)


def test_outputs_env_and_conditions_between_steps_and_jobs(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yml"
    flow.write_text(
        textwrap.dedent(
            """
            on:
              workflow_dispatch:
                inputs:
                  word: {default: "hi"}
            env:
              TOP: top
            jobs:
              first:
                runs-on: ubuntu-latest
                outputs:
                  list: ${{ steps.make.outputs.list }}
                steps:
                  - id: make
                    run: |
                      echo 'list=["a", "b"]' >> "$GITHUB_OUTPUT"
                      echo "LATER=later" >> "$GITHUB_ENV"
                  - run: test "$LATER" = later && test "$TOP" = top
                  - run: exit 1
                  - if: failure()
                    run: echo "recovering ${{ inputs.word }}" >> "$GITHUB_STEP_SUMMARY"
                  - run: echo never
              second:
                needs: first
                if: always()
                runs-on: ubuntu-latest
                strategy:
                  fail-fast: false
                  matrix:
                    x: ${{ fromJSON(needs.first.outputs.list) }}
                steps:
                  - run: test "${{ matrix.x }}" = a
              third:
                needs: first
                runs-on: ubuntu-latest
                steps:
                  - run: echo skipped because first failed
            """
        )
    )
    rehearsal = Rehearsal(flow, tmp_path, inputs={"word": "there"}, echo=False)
    assert rehearsal.run() == 1
    got = [(r.label, r.result) for r in rehearsal.results]
    assert got == [
        ("first", "failure"),
        ("second (a)", "success"),
        ("second (b)", "failure"),
        ("third", "skipped"),
    ]
    assert rehearsal.results[0].failed_step == "exit 1"
    assert "recovering there" in (tmp_path / "results" / "rehearsal" / "summary.md").read_text()
