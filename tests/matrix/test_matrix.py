"""matrices/matrix.toml loading, validation errors and cell parsing (tools/matrix.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import tomllib
from packaging.version import Version

from conformance.tools.matrix import (
    DEFAULT_MATRIX_PATH,
    MatrixError,
    load_matrix,
    parse_matrix,
    requested_sessions,
    unknown_session_error,
)

RAW = tomllib.loads(DEFAULT_MATRIX_PATH.read_text(encoding="utf-8"))


def _with(**changes: object) -> dict:
    data = copy.deepcopy(RAW)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def test_real_matrix_covers_2_5_to_2_15_latest_patches() -> None:
    m = load_matrix()
    assert m.minors == [f"2.{n}" for n in range(5, 16)]
    assert m.default_minor == "2.13"
    for rel in m.releases:
        assert Version(rel.version).release[:2] == Version(rel.minor).release[:2]
    assert m.release("2.8").version == "2.8.0"
    assert m.release("2.13").requirement == "torch==2.13.0"
    assert m.allocators == ("malloc", "aligned", "guard")
    assert m.sanitizers == ("none", "asan")


def test_sessions_include_issue_cells_and_respect_exclusions() -> None:
    m = load_matrix()
    sessions = m.sessions()
    for name in (
        "conformance-2.8",
        "conformance-2.13-asan",
        "conformance-2.13-guard",
        "conformance-2.5-aligned",
        "conformance-2.15",
    ):
        assert name in sessions
    assert "conformance-2.13-guard-asan" not in sessions
    assert "conformance-2.5-asan" not in sessions
    assert len(sessions) == len(set(sessions))
    for minor in m.minors:  # every torch has its plain cell
        assert f"conformance-{minor}" in sessions


def test_cell_env() -> None:
    m = load_matrix()
    asan = m.cell("2.13-asan")
    assert asan.asan and asan.build_env() == {"ECHO_NPU_ASAN": "1"}
    assert asan.run_env() == {"ECHO_NPU_ALLOCATOR": "malloc", "ASAN_OPTIONS": "detect_leaks=0"}
    guard = m.cell("conformance-2.8-guard")
    assert guard.session == "conformance-2.8-guard" and guard.build_env() == {}
    assert guard.run_env() == {"ECHO_NPU_ALLOCATOR": "guard"}
    assert m.cell("").session == "conformance-2.13"
    assert "2.8.0" in m.cell("2.8").describe()


def test_versions_are_ordered_by_packaging_not_text() -> None:
    data = _with()
    data["torch"]["release"] = list(reversed(data["torch"]["release"]))
    m = parse_matrix(data)
    assert m.minors.index("2.9") < m.minors.index("2.10")


def test_adding_a_release_in_one_place_adds_its_sessions() -> None:
    data = _with()
    data["torch"]["release"].append({"minor": "2.16", "version": "2.16.0"})
    m = parse_matrix(data)
    assert {"conformance-2.16", "conformance-2.16-guard", "conformance-2.16-asan"} <= set(
        m.sessions()
    )


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_with(schema=2), "schema"),
        (_with(torch__default="2.99"), "2.99 is not a release"),
        (_with(torch__bogus=1), "unknown key 'bogus'"),
        (_with(allocator__default="slab"), "'slab' is not one of the modes"),
        (_with(exclude=[{"sanitizer": "asan"}]), "needs a reason"),
        (_with(exclude=[{"allocator": "slab", "reason": "x"}]), "'slab' is not one of"),
        (_with(exclude=[{"torch": ">=", "reason": "x"}]), "not a valid version specifier"),
        (_with(exclude=[{"torch": "2.13", "reason": "x"}]), "removes the default cell"),
        (_with(torch__release=[]), "at least one [[torch.release]]"),
        (_with(torch__release=[{"minor": "2.8", "version": "2.9.0"}]), "does not belong"),
        (_with(torch__release=[{"minor": "2.x", "version": "2.9.0"}]), "major.minor"),
    ],
)
def test_bad_matrix_is_one_line_error(data: dict, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(data)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_duplicate_minor() -> None:
    data = _with()
    data["torch"]["release"].append(dict(data["torch"]["release"][0]))
    with pytest.raises(MatrixError, match="listed twice"):
        parse_matrix(data)


def test_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("schema = [", encoding="utf-8")
    with pytest.raises(MatrixError, match="invalid TOML"):
        load_matrix(bad)
    with pytest.raises(MatrixError, match="not found"):
        load_matrix(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("2.99", "valid: 2.5, 2.6"),
        ("conformance-2.99", "torch 2.99 is not in the matrix"),
        ("2.8-slab", "neither an allocator"),
        ("2.5-asan", "excluded"),
        ("2.13-guard-asan", "excluded"),
    ],
)
def test_unknown_cell_errors_name_the_fix(name: str, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        load_matrix().cell(name)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_requested_sessions_parsing() -> None:
    assert requested_sessions(["-s", "a", "b", "--", "-s", "c"], {}) == ["a", "b"]
    assert requested_sessions(["--session=x"], {}) == ["x"]
    assert requested_sessions(["-e", "y", "-r"], {}) == ["y"]
    assert requested_sessions([], {"NOXSESSION": "p,q"}) == ["p", "q"]


def test_unknown_session_error() -> None:
    m = load_matrix()
    assert unknown_session_error(m, ["-s", "conformance-2.8", "lint"], {}) is None
    msg = unknown_session_error(m, ["-s", "conformance-2.99"], {})
    assert msg and msg.startswith("nox: ") and "valid: 2.5" in msg and "2.15" in msg
    msg = unknown_session_error(m, ["-s", "conformance-2.8-malloc"], {})
    assert msg and "conformance-2.8" in msg
