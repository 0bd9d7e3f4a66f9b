"""ci/build.py + ci/sources.py: build keys (rebuild on a source edit), source copies, the
staged suite and the suite's command line and environment for any described backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.ci.build import (
    build_key,
    probe_release,
    stage_suite,
    suite_argv,
    suite_environment,
    suite_requirements,
)
from conformance.ci.matrix_file import load_matrix
from conformance.ci.sources import copy_sources, iter_files
from conformance.engine.checkers import LaunchError
from tests.userrepo import make_user_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_user_repo(tmp_path)


def test_editing_a_watched_source_changes_the_build_key(repo: Path) -> None:
    m = load_matrix(repo / "conformance-matrix.toml")
    cell = m.cell("2.12")
    key = build_key(cell)
    assert key == build_key(m.cell("2.12-guard"))  # the allocator is chosen at run time
    assert key != build_key(m.cell("2.13"))  # another torch
    assert key != build_key(m.cell("2.12-asan"))  # another build environment
    (repo / "docs" / "notes.md").write_text("edited\n")  # not watched
    (repo / "build" / "more.o").write_text("x")  # a build product
    assert build_key(cell) == key
    (repo / "csrc" / "kernels.cpp").write_text("int kernel() { return 2; }\n")
    assert build_key(cell) != key
    (repo / "csrc" / "new.cpp").write_text("")  # a new file counts too
    assert build_key(load_matrix(repo / "conformance-matrix.toml").cell("2.12")) != key


def test_build_settings_are_part_of_the_key(tmp_path: Path) -> None:
    a = make_user_repo(tmp_path / "a", command="echo one")
    b = make_user_repo(tmp_path / "b", command="echo two")
    key_a = build_key(load_matrix(a / "conformance-matrix.toml").cell("2.12"))
    key_b = build_key(load_matrix(b / "conformance-matrix.toml").cell("2.12"))
    assert key_a != key_b


def test_copy_takes_include_without_build_products(repo: Path, tmp_path: Path) -> None:
    dest = copy_sources(tmp_path / "copy", repo, ("mynpu", "csrc"))
    assert sorted(p.as_posix() for p in iter_files(dest)) == [
        "csrc/kernels.cpp",
        "mynpu/__init__.py",
    ]
    everything = {p.as_posix() for p in iter_files(repo)}
    assert "docs/notes.md" in everything and "build/stale.o" not in everything


def test_staged_suite_is_the_package_with_its_own_pytest_ini(tmp_path: Path) -> None:
    suite = stage_suite(tmp_path / "suite", tmp_path / "cache")
    assert (suite / "conformance" / "plugin.py").is_file()
    assert (suite / "conformance" / "conftest.py").is_file()  # registers the plugin
    assert not list(suite.rglob("__pycache__"))
    ini = (suite / "pytest.ini").read_text()
    assert f"cache_dir = {tmp_path / 'cache'}" in ini


def test_suite_command_and_environment_follow_the_description(repo: Path, tmp_path: Path) -> None:
    m = load_matrix(repo / "conformance-matrix.toml")
    cell = m.cell("2.13-guard")
    argv = suite_argv(cell, tmp_path / "out")
    assert argv[:6] == ["-m", "pytest", "-c", "pytest.ini", "--rootdir=.", "conformance"]
    assert "--expectations=none" in argv
    assert f"--junitxml={tmp_path / 'out' / 'junit.xml'}" in argv
    assert f"--results={tmp_path / 'out'}" in argv
    assert suite_environment(cell) == {
        "CONFORMANCE_BACKEND": "mynpu",
        "MYNPU_LOG": "1",
        "MYNPU_ALLOCATOR": "guard",
    }
    echo = load_matrix().cell("2.13")
    assert suite_argv(echo, tmp_path)[-1].endswith("matrices/expectations/echo_npu/common.toml")


def test_asan_cell_preloads_the_runtime() -> None:
    cell = load_matrix().cell("2.13-asan")
    try:
        env = suite_environment(cell)
    except LaunchError:
        pytest.skip("gcc's libasan is not installed")
    assert "libasan" in env["LD_PRELOAD"].split(":")[0]
    assert env["ASAN_OPTIONS"] == "detect_leaks=0" and env["ECHO_NPU_ALLOCATOR"] == "malloc"


def test_suite_requirements_leave_torch_to_the_cell() -> None:
    reqs = suite_requirements()
    names = [r.split(">")[0].split("=")[0].split("<")[0] for r in reqs]
    assert "torch" not in names and "pytest" in names and "expecttest" in names
    assert any(n.startswith("transformers") for n in names)
    assert not any(n.startswith("transformers") for n in suite_requirements(scenarios=False))


def test_probe_release_for_a_version_outside_the_matrix() -> None:
    rel = probe_release("2.9.0")
    assert rel.minor == "2.9" and rel.requirement == "torch==2.9.0"
