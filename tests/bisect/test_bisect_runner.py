"""VenvProbeRunner without real installs: its commands, venv reuse, gated env and outcomes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from conformance.bisect.runner import OK_MARKER, VenvProbeRunner, copy_sources, gated_fault_env


def make_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_step: str = "", **kw):
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_cmd(self, args, log, env=None):
        calls.append((list(args), dict(env or {})))
        if fail_step and fail_step in " ".join(args):
            raise subprocess.CalledProcessError(1, args)
        if args[:2] == ["uv", "venv"]:
            Path(args[-1]).mkdir(parents=True)
        if "--results" in args:  # write results like the suite: leak fault -> failed
            results = Path(args[args.index("--results") + 1])
            results.mkdir(parents=True)
            status = "failed" if (env or {}).get("ECHO_NPU_FAULTS") == "leak" else "passed"
            case = {"id": "test_matches_cpu[mul.Tensor]", "op": "mul", "status": status}
            (results / "cases-main.jsonl").write_text(json.dumps(case) + "\n")
            if status == "failed":
                raise subprocess.CalledProcessError(1, args)  # pytest exit 1: results decide

    monkeypatch.setattr(VenvProbeRunner, "_cmd", fake_cmd)
    monkeypatch.setattr(
        "conformance.bisect.runner.copy_sources", lambda dest: dest.mkdir(parents=True) or dest
    )
    runner = VenvProbeRunner(
        "mul.Tensor",
        venv_dir=tmp_path / "venvs",
        work_dir=tmp_path / "work",
        env_for=gated_fault_env("leak", Version("2.10.0")),
        **kw,
    )
    return runner, calls


def test_install_build_run_then_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, calls = make_runner(tmp_path, monkeypatch)
    probe = runner.probe(Version("2.9.1"))
    assert probe.outcome == "pass" and probe.installed, probe.detail
    joined = [" ".join(c) for c, _ in calls]
    assert joined[0].startswith("uv venv --python 3.11")
    assert "torch==2.9.1" in joined[1] and "expecttest" in joined[1]
    assert "--no-build-isolation" in joined[2] and "--no-cache" in joined[2]
    assert "-k mul.Tensor" in joined[3] and calls[3][1].get("ECHO_NPU_FAULTS") is None
    assert (tmp_path / "venvs" / "torch-2.9.1" / OK_MARKER).is_file()
    assert Path(probe.log).is_file()
    calls.clear()
    again = runner.probe(Version("2.9.1"))
    assert again.outcome == "pass" and not again.installed and len(calls) == 1  # cached venv


def test_gated_fault_makes_new_versions_fail(tmp_path: Path, monkeypatch) -> None:
    runner, calls = make_runner(tmp_path, monkeypatch, discard_venvs=True)
    probe = runner.probe(Version("2.10.0"))
    assert probe.outcome == "fail" and calls[-1][1]["ECHO_NPU_FAULTS"] == "leak"
    assert not (tmp_path / "venvs" / "torch-2.10.0").exists()  # discarded


def test_failed_build_is_an_error_outcome(tmp_path: Path, monkeypatch) -> None:
    runner, _ = make_runner(tmp_path, monkeypatch, fail_step="--no-build-isolation")
    probe = runner.probe(Version("2.9.1"))
    assert probe.outcome == "error" and "install/build failed" in probe.detail
    assert not (tmp_path / "venvs" / "torch-2.9.1" / OK_MARKER).exists()


def test_copy_sources_leaves_build_products_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "backend" / "echo_npu").mkdir(parents=True)
    (root / "backend" / "echo_npu" / "__init__.py").write_text("")
    (root / "backend" / "echo_npu" / "_C.so").write_text("")
    (root / "setup.py").write_text("")
    dest = copy_sources(tmp_path / "dest", root)
    assert (dest / "backend" / "echo_npu" / "__init__.py").is_file()
    assert not (dest / "backend" / "echo_npu" / "_C.so").exists()
    assert (dest / "setup.py").is_file() and (dest / "README.md").is_file()
