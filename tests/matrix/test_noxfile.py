"""noxfile.py: its session list is generated from matrices/matrix.toml; bad cells are one-liners."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.tools.matrix import load_matrix

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
    assert [s["session"] for s in listed] == load_matrix().sessions()
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
