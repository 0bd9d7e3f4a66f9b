"""VenvProbeRunner without real installs: its commands for a described backend, venv reuse keyed
on the build, rebuild after a source edit, skip on a failed install/build, the gated env."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from conformance.bisect.probe import OK_MARKER, VenvProbeRunner, gated_env  # noqa: E402
from conformance.ci.matrix_file import load_matrix  # noqa: E402
from conformance.ci.sources import copy_sources  # noqa: E402
from tests.userrepo import make_user_repo


def make_runner(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fail_step: str = "",
    matrix: Path | None = None,
    **kw,
):
    calls: list[tuple[list[str], dict[str, str], Path | None]] = []

    def fake_cmd(self, args, log, env=None, cwd=None):
        calls.append((list(args), dict(env or {}), cwd))
        if fail_step and fail_step in " ".join(args):
            raise subprocess.CalledProcessError(1, args)
        if args[:2] == ["uv", "venv"]:
            Path(args[-1]).mkdir(parents=True)
        given = [a for a in args if a.startswith("--results=")]
        if given:  # write results like the suite: leak fault -> failed
            results = Path(given[0].split("=", 1)[1])
            results.mkdir(parents=True)
            status = "failed" if (env or {}).get("MYNPU_FAULTS") == "leak" else "passed"
            case = {"id": "test_matches_cpu[mul.Tensor]", "op": "mul", "status": status}
            (results / "cases-main.jsonl").write_text(json.dumps(case) + "\n")
            if status == "failed":
                raise subprocess.CalledProcessError(1, args)  # pytest exit 1: results decide

    monkeypatch.setattr(VenvProbeRunner, "_cmd", fake_cmd)
    repo = make_user_repo(tmp_path)
    runner = VenvProbeRunner(
        "mul.Tensor",
        matrix=load_matrix(matrix or repo / "conformance-matrix.toml"),
        venv_dir=tmp_path / "venvs",
        work_dir=tmp_path / "work",
        env_for=gated_env({"MYNPU_FAULTS": "leak"}, Version("2.10.0")),
        **kw,
    )
    return runner, calls, repo


def test_install_build_run_then_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, calls, repo = make_runner(tmp_path, monkeypatch)
    probe = runner.probe(Version("2.9.1"))
    assert probe.outcome == "pass" and probe.installed, probe.detail
    joined = [" ".join(c) for c, _, _ in calls]
    assert joined[0].startswith("uv venv --python 3.11")
    assert "torch==2.9.1" in joined[1] and "expecttest" in joined[1] and "ninja" in joined[1]
    build, env, cwd = calls[2]
    assert build[:2] == ["sh", "-c"] and "builds.log" in build[2]  # the described command
    assert env["VIRTUAL_ENV"] == str(runner.venv_for(Version("2.9.1")))
    assert env["CONFORMANCE_TORCH_VERSION"] == "2.9.1" and cwd.name == "torch-2.9.1"
    run, env, cwd = calls[3]
    assert "-k mul.Tensor" in " ".join(run) and env.get("MYNPU_FAULTS") is None
    assert env["CONFORMANCE_BACKEND"] == "mynpu" and env["MYNPU_ALLOCATOR"] == "plain"
    assert (cwd / "conformance" / "plugin.py").is_file()  # the staged suite
    assert runner.venv_for(Version("2.9.1")).name.startswith("torch-2.9.1-")
    assert (runner.venv_for(Version("2.9.1")) / OK_MARKER).is_file()
    assert Path(probe.log).is_file()
    calls.clear()
    again = runner.probe(Version("2.9.1"))
    assert again.outcome == "pass" and not again.installed and len(calls) == 1  # cached venv


def test_editing_a_backend_source_rebuilds_the_cached_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, calls, repo = make_runner(tmp_path, monkeypatch)
    first = runner.venv_for(Version("2.9.1"))
    runner.probe(Version("2.9.1"))
    (repo / "docs" / "notes.md").write_text("unwatched\n")
    assert runner.venv_for(Version("2.9.1")) == first
    (repo / "csrc" / "kernels.cpp").write_text("int kernel() { return 2; }\n")
    second = runner.venv_for(Version("2.9.1"))
    assert second != first
    calls.clear()
    probe = runner.probe(Version("2.9.1"))
    assert probe.installed and any(c[0][:2] == ["sh", "-c"] for c in calls)  # rebuilt
    assert second.is_dir() and not first.exists()  # the stale build is removed


def test_gated_fault_makes_new_versions_fail(tmp_path: Path, monkeypatch) -> None:
    runner, calls, _ = make_runner(tmp_path, monkeypatch, discard_venvs=True)
    probe = runner.probe(Version("2.10.0"))
    assert probe.outcome == "fail" and calls[-1][1]["MYNPU_FAULTS"] == "leak"
    assert not runner.venv_for(Version("2.10.0")).exists()  # discarded


@pytest.mark.parametrize(
    ("step", "what"), [("builds.log", "build of mynpu"), ("torch==", "install of torch 2.9.1")]
)
def test_failed_install_or_build_is_a_skip(
    tmp_path: Path, monkeypatch, step: str, what: str
) -> None:
    runner, _, _ = make_runner(tmp_path, monkeypatch, fail_step=step)
    probe = runner.probe(Version("2.9.1"))
    assert (
        probe.outcome == "skip" and probe.detail.startswith(f"{what}") and "failed" in probe.detail
    )
    assert not runner.venv_for(Version("2.9.1")).exists()  # retried next time


def test_echo_npu_probe_uses_its_description(tmp_path: Path, monkeypatch) -> None:
    runner, calls, _ = make_runner(tmp_path, monkeypatch, matrix=load_matrix().path, sanitizer=None)
    runner.probe(Version("2.9.1"))
    build, env, cwd = calls[2]
    assert "--no-build-isolation" in build[2] and cwd.name == "torch-2.9.1"
    assert calls[3][1]["CONFORMANCE_BACKEND"] == "echo_npu"
    assert calls[3][1]["ECHO_NPU_ALLOCATOR"] == "malloc"
    run = calls[3][0]
    assert run[-3].startswith("--expectations=") and run[-3].endswith("echo_npu/common.toml")


def test_copy_sources_leaves_build_products_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "backend" / "echo_npu").mkdir(parents=True)
    (root / "backend" / "echo_npu" / "__init__.py").write_text("")
    (root / "backend" / "echo_npu" / "_C.so").write_text("")
    (root / "setup.py").write_text("")
    dest = copy_sources(tmp_path / "dest", root)
    assert (dest / "backend" / "echo_npu" / "__init__.py").is_file()
    assert not (dest / "backend" / "echo_npu" / "_C.so").exists()
    assert (dest / "setup.py").is_file()


def test_a_compile_probe_runs_the_suite_with_the_compiled_modes(tmp_path: Path, monkeypatch):
    """bisect --compile: the probe's suite runs with the matrix's [compile] modes (so -compile
    case ids select), on the plain build (the same venv as a plain probe of that release)."""
    modes, version = "grad,inference,sync,compile", Version("2.9.1")
    plain, _, _ = make_runner(tmp_path / "plain", monkeypatch, matrix=load_matrix().path)
    plain_venv = plain.venv_for(version).name
    runner, calls, _ = make_runner(tmp_path, monkeypatch, matrix=load_matrix().path, modes=modes)
    runner.probe(version)
    assert calls[3][1]["CONFORMANCE_MODES"] == modes
    assert runner.venv_for(version).name == plain_venv
