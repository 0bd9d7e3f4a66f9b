"""ci/sessions.py with a fake nox Session (no torch install): a user's backend described by its
own matrix file is installed, built by its command in a fresh copy, rebuilt only when a watched
source changes, and run with the staged suite and its environment."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.ci import sessions
from conformance.ci.build import STAMP
from conformance.ci.matrix_file import load_matrix
from tests.userrepo import builds, make_user_repo


class FakeSession:
    """The parts of nox.Session the cell sessions use; the build command really runs."""

    def __init__(self, venv: Path, posargs: tuple[str, ...] = ()) -> None:
        self.venv = venv
        venv.mkdir(parents=True, exist_ok=True)
        self.virtualenv = SimpleNamespace(location=str(venv))
        self.posargs = list(posargs)
        self.calls: list[tuple] = []
        self.cwd: Path | None = None

    def install(self, *args: str) -> None:
        self.calls.append(("install", args))

    def create_tmp(self) -> str:
        tmp = self.venv / "tmp"
        tmp.mkdir(exist_ok=True)
        return str(tmp)

    @contextmanager
    def chdir(self, path: str | Path) -> Iterator[None]:
        old, self.cwd = self.cwd, Path(path)
        try:
            yield
        finally:
            self.cwd = old

    def run_install(self, *args: str, env: dict, external: bool) -> bool:
        self.calls.append(("build", args, env, self.cwd))
        subprocess.run(args, cwd=self.cwd, env={**os.environ, **env}, check=True)
        return True

    def run(self, *args: str, env: dict | None = None, **kw: object) -> None:
        self.calls.append(("run", args, env, self.cwd))

    def log(self, message: str) -> None:
        self.calls.append(("log", message))

    def error(self, message: str) -> None:
        raise RuntimeError(message)

    def of(self, kind: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == kind]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_user_repo(tmp_path)


def test_cell_installs_builds_and_runs_the_described_backend(repo: Path, tmp_path: Path) -> None:
    cell = load_matrix(repo / "conformance-matrix.toml").cell("2.12-guard")
    session = FakeSession(tmp_path / "venv")
    sessions._run_cell(session, cell, ["-k", "masked_fill"], repo)
    (install,) = session.of("install")
    assert "torch==2.12.1" in install[1] and "ninja" in install[1] and "pytest>=8" in install[1]
    (build,) = session.of("build")
    assert build[1][:2] == ("sh", "-c") and build[2]["CONFORMANCE_TORCH_VERSION"] == "2.12.1"
    assert build[3] == tmp_path / "venv" / "tmp" / "src"  # a fresh copy, not the repo
    assert sorted(p.name for p in build[3].iterdir()) == ["csrc", "mynpu"]
    assert builds(tmp_path) == [f"2.12.1 asan=0 {build[3]}"]
    stamp = json.loads((tmp_path / "venv" / STAMP).read_text())
    assert stamp["torch"] == "2.12.1" and stamp["module"] == "mynpu"
    (run,) = session.of("run")
    args, env, cwd = run[1], run[2], run[3]
    assert args[:3] == ("python", "-m", "pytest") and args[-2:] == ("-k", "masked_fill")
    assert f"--results={repo / 'results' / 'conformance-2.12-guard'}" in args
    assert "--expectations=none" in args and "conformance" in args
    assert (cwd / "conformance" / "plugin.py").is_file() and (cwd / "pytest.ini").is_file()
    assert env == {"CONFORMANCE_BACKEND": "mynpu", "MYNPU_LOG": "1", "MYNPU_ALLOCATOR": "guard"}


def test_a_shard_runs_into_a_folder_of_its_own(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--shard (after --) or $CONFORMANCE_SHARD (the nightly's jobs): results/<cell>-shard-K-of-N,
    so shards of one cell never overwrite each other and the report merges them."""
    cell = load_matrix(repo / "conformance-matrix.toml").cell("2.12")
    monkeypatch.setenv("CONFORMANCE_SHARD", "2-of-3")
    session = FakeSession(tmp_path / "venv")
    sessions._run_cell(session, cell, [], repo)
    assert (
        f"--results={repo / 'results' / 'conformance-2.12-shard-2-of-3'}" in session.of("run")[0][1]
    )
    session = FakeSession(tmp_path / "venv")
    sessions._run_cell(session, cell, ["--shard", "1/3"], repo)  # the argument wins
    assert (
        f"--results={repo / 'results' / 'conformance-2.12-shard-1-of-3'}" in session.of("run")[0][1]
    )
    monkeypatch.setenv("CONFORMANCE_SHARD", "4/3")
    with pytest.raises(RuntimeError, match=r"--shard '4/3': give K/N"):
        sessions._run_cell(FakeSession(tmp_path / "venv"), cell, [], repo)


def test_nightly_rehearsal_arguments() -> None:
    assert sessions.nightly_args(["2.12", "--shards", "4", "2.13"]) == (["2.12", "2.13"], "4")
    assert sessions.nightly_args(["--shards=3", "all"]) == (["all"], "3")
    assert sessions.nightly_args(["2.13"]) == (["2.13"], None)


def test_rebuild_only_when_a_watched_source_changes(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = repo / "conformance-matrix.toml"
    venv = tmp_path / "venv"

    def run() -> FakeSession:
        session = FakeSession(venv)
        sessions.install_and_build(session, load_matrix(matrix).cell("2.13"))
        return session

    run()
    again = run()
    assert len(builds(tmp_path)) == 1 and not again.of("build")
    assert any("is current" in c[1] for c in again.of("log"))
    (repo / "docs" / "notes.md").write_text("not a source\n")
    run()
    assert len(builds(tmp_path)) == 1
    (repo / "csrc" / "kernels.cpp").write_text("int kernel() { return 2; }\n")  # the edit
    edited = run()
    assert len(builds(tmp_path)) == 2 and edited.of("build")
    monkeypatch.setenv("CONFORMANCE_REBUILD", "1")
    run()
    assert len(builds(tmp_path)) == 3


def test_failed_build_leaves_no_stamp(tmp_path: Path) -> None:
    repo = make_user_repo(tmp_path, command="exit 3")
    session = FakeSession(tmp_path / "venv")
    with pytest.raises(subprocess.CalledProcessError):
        sessions.install_and_build(session, load_matrix(repo / "conformance-matrix.toml").cell(""))
    assert not (tmp_path / "venv" / STAMP).exists()


def test_sanitizer_cell_builds_with_its_environment(repo: Path, tmp_path: Path) -> None:
    cell = load_matrix(repo / "conformance-matrix.toml").cell("2.13-asan")
    sessions.install_and_build(FakeSession(tmp_path / "venv"), cell)
    assert builds(tmp_path)[0].startswith("2.13.0 asan=1 ")
