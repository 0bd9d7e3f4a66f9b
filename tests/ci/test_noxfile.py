"""noxfile.py: its session list is generated from matrices/matrix.toml; bad cells are one-liners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.ci.matrix_file import load_matrix

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("nox", reason="the nox `tests` session installs nox")


def _nox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "--noxfile", str(ROOT / "noxfile.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_json_listing_is_the_matrix() -> None:
    proc = _nox("-l", "--json", "-t", "conformance")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    xla = load_matrix(ROOT / "matrices" / "xla.toml")
    assert [s["session"] for s in listed] == load_matrix().sessions() + xla.sessions()
    assert xla.sessions() == ["conformance-xla-2.9"]  # named apart by the backend's label
    for entry in listed:
        assert entry["description"].startswith("Conformance suite on torch")
        assert entry["python"] == load_matrix().python


def test_listing_describes_every_session() -> None:
    proc = _nox("-l")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln[:2] in ("* ", "- ")]
    names = {ln[2:].split(" ")[0] for ln in lines}
    assert {"tests", "lint", "report", "conformance"} <= names
    assert set(load_matrix().sessions()) <= names
    assert all(" -> " in ln for ln in lines), "every session needs a docstring"


def test_a_cell_of_the_lazy_device_matrix_is_checked_against_its_own_file() -> None:
    proc = _nox("-s", "conformance-xla-2.8")
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "torch 2.8 is not in the matrix matrices/xla.toml (valid: 2.9)" in err


@pytest.mark.parametrize(
    "args",
    [("-s", "conformance-2.99"), ("-s", "conformance", "--", "2.99", "-k", "x")],
)
def test_unknown_version_is_a_one_line_error(args: tuple[str, ...]) -> None:
    proc = _nox(*args)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "\n" not in err, err
    assert "torch 2.99 is not in the matrix" in err
    assert "valid: " + ", ".join(load_matrix().minors) in err
    assert "Traceback" not in err


def _user_repo(tmp_path: Path) -> Path:
    from conformance.ci.init import main as init_main
    from tests.userrepo import make_user_repo

    repo = make_user_repo(tmp_path)
    (repo / "conformance-matrix.toml").rename(tmp_path / "described.toml")
    assert init_main(["--dir", str(repo), "--module", "mynpu", "--torch", "2.12,2.13"]) == 0
    (tmp_path / "described.toml").replace(repo / "conformance-matrix.toml")  # richer description
    return repo


def _nox_in(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


def test_user_repository_thin_noxfile_lists_its_backend_cells(tmp_path: Path) -> None:
    repo = _user_repo(tmp_path)
    proc = _nox_in(repo, "-l", "--json", "-t", "conformance")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [s["session"] for s in listed] == [
        "conformance-2.12",
        "conformance-2.12-guard",
        "conformance-2.12-asan",
        "conformance-2.12-guard-asan",
        "conformance-2.13",
        "conformance-2.13-guard",
        "conformance-2.13-asan",
        "conformance-2.13-guard-asan",
    ]
    assert all("mynpu" in s["description"] for s in listed)
    names = _nox_in(repo, "-l").stdout
    for session in ("report", "bisect", "nightly", "conformance", "mutants"):
        assert f"- {session} -> " in names
    bad = _nox_in(repo, "-s", "conformance-2.99")
    assert bad.returncode != 0 and "valid: 2.12, 2.13" in bad.stderr.strip().splitlines()[-1]


def test_conformance_matrix_points_this_noxfile_at_another_backend(tmp_path: Path) -> None:
    repo = _user_repo(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "--noxfile",
            str(ROOT / "noxfile.py"),
            "-l",
            "--json",
            "-t",
            "conformance",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CONFORMANCE_MATRIX": str(repo / "conformance-matrix.toml")},
    )
    assert proc.returncode == 0, proc.stderr
    cells = [s["session"] for s in json.loads(proc.stdout)]
    assert cells[0] == "conformance-2.12" and len(cells) == 8


def test_bad_matrix_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("schema = 2\n[torch]\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "--noxfile", str(ROOT / "noxfile.py"), "-l"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CONFORMANCE_MATRIX": str(bad)},
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("nox: ")
    assert "Traceback" not in proc.stderr
