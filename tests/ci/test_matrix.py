"""matrices/matrix.toml loading, validation errors and cell parsing
(ci/matrix_file.py, ci/matrix.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import tomllib
from packaging.version import Version

from conformance.ci.matrix import requested_sessions, unknown_session_error
from conformance.ci.matrix_file import DEFAULT_MATRIX_PATH, load_matrix, parse_matrix
from conformance.ci.matrix_spec import MatrixError

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
    assert asan.preload == ("asan",)
    guard = m.cell("conformance-2.8-guard")
    assert guard.session == "conformance-2.8-guard" and guard.build_env() == {}
    assert guard.run_env() == {"ECHO_NPU_ALLOCATOR": "guard"} and guard.preload == ()
    assert m.cell("").session == "conformance-2.13"
    assert "2.8.0" in m.cell("2.8").describe() and "echo_npu" in m.cell("2.8").describe()


def test_echo_npu_is_one_backend_description() -> None:
    b = load_matrix().backend
    root = DEFAULT_MATRIX_PATH.parents[1]
    assert b.module == "echo_npu" and b.fault_env == "ECHO_NPU_FAULTS"
    assert b.build.source == root / "backend" and "csrc" in b.build.include  # its own package
    assert b.build.watch == ("pyproject.toml", "setup.py", "csrc", "echo_npu")
    assert b.build.argv()[:2] == ["sh", "-c"] and "--no-build-isolation" in b.build.argv()[2]
    assert b.allocator.env == "ECHO_NPU_ALLOCATOR" and b.allocator.default == "malloc"
    assert [s.name for s in b.sanitizers] == ["asan"]
    assert b.expectation_files("2.13") == [root / "matrices/expectations/echo_npu/common.toml"]


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
        (_with(schema=3), "schema"),
        (_with(schema=1), "moved [allocator] and [sanitizer] into [backend]"),
        (_with(torch__default="2.99"), "2.99 is not a release"),
        (_with(torch__bogus=1), "unknown key 'bogus'"),
        (_with(backend__allocator__default="slab"), "'slab' is not one of the modes"),
        (_with(exclude=[{"sanitizer": "asan"}]), "needs a reason"),
        (_with(exclude=[{"allocator": "slab", "reason": "x"}]), "'slab' is not one of"),
        (_with(exclude=[{"torch": ">=", "reason": "x"}]), "not a valid version specifier"),
        (_with(exclude=[{"torch": "2.13", "reason": "x"}]), "removes the default cell"),
        (_with(torch__release=[]), "at least one [[torch.release]]"),
        (_with(torch__release=[{"minor": "2.8", "version": "2.9.0"}]), "does not belong"),
        (_with(torch__release=[{"minor": "2.x", "version": "2.9.0"}]), "major.minor"),
        (_with(nightly={"shards": 0}), "[nightly].shards: give a whole number from 1 to 64"),
        (_with(nightly={"shards": "two"}), "[nightly].shards: give a whole number from 1 to"),
        (_with(nightly={"shard": 2}), "[nightly]: unknown key 'shard' (expected one of: shards)"),
        (_with(nightly=2), "'nightly' must be a table"),
    ],
)
def test_bad_matrix_is_one_line_error(data: dict, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(data)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_with(backend=None), "missing table [backend]; describe the backend"),
        (_with(backend__module=None), "[backend].module (the module whose import registers it)"),
        (_with(backend__module="my-npu"), "'my-npu' is not an importable module name"),
        (_with(backend__bogus=1), "[backend]: unknown key 'bogus' (expected one of: module"),
        (_with(backend__build=None), "add [backend.build] with command"),
        (_with(backend__build__command=""), "[backend.build].command: expected a shell command"),
        (_with(backend__build__command=[1]), "expected a shell command string or an argv list"),
        (_with(backend__build__source="nope"), "[backend.build].source: folder"),
        (_with(backend__build__include=["nope"]), "[backend.build].include: 'nope' not found"),
        (_with(backend__build__watch=["nope"]), "[backend.build].watch: 'nope' not found"),
        (_with(backend__build__env={"X": 1}), "[backend.build].env.X: expected a string"),
        (_with(backend__build__env={"1X": "a"}), "'1X' is not an environment variable name"),
        (_with(backend__requires="numpy"), "[backend].requires: expected a list of strings"),
        (_with(backend__expectations="nope"), "[backend].expectations: folder"),
        (_with(backend__fault_env="A B"), "[backend].fault_env: 'A B' is not an environment"),
        (_with(backend__allocator__env=None), "[backend.allocator].env: 3 modes need"),
        (_with(backend__allocator__modes=["Big"]), "'Big' must be lowercase"),
        (
            _with(backend__sanitizers={"none": {}}),
            "[backend.sanitizers.none]: the name must be lowercase",
        ),
        (
            _with(backend__sanitizers={"asan": {"preload": ["valgrind"]}}),
            "[backend.sanitizers.asan].preload: 'valgrind' is not one of asan, malloc-check",
        ),
        (
            _with(backend__sanitizers={"asan": {"run": {}}}),
            "[backend.sanitizers.asan]: unknown key 'run'",
        ),
    ],
)
def test_bad_backend_is_one_line_naming_key_and_fix(data: dict, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(data)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_nightly_shards() -> None:
    assert parse_matrix(RAW).shards == 2  # echo_npu's nightly: two jobs per cell
    assert parse_matrix(_with(nightly=None)).shards == 1  # without [nightly]: not sharded
    assert parse_matrix(_with(nightly={"shards": 8})).shards == 8


def test_minimal_user_backend(tmp_path: Path) -> None:
    """No allocator table: one mode, no suffix, no variable; sanitizers optional."""
    (tmp_path / "src").mkdir()
    (tmp_path / "m.toml").write_text(
        'schema = 2\n[torch]\n[[torch.release]]\nminor = "2.12"\nversion = "2.12.1"\n'
        '[[torch.release]]\nminor = "2.13"\nversion = "2.13.0"\n'
        '[backend]\nmodule = "my_npu"\n[backend.build]\nsource = "src"\n'
        'command = ["pip", "install", "."]\n',
        encoding="utf-8",
    )
    m = load_matrix(tmp_path / "m.toml")
    assert m.sessions() == ["conformance-2.12", "conformance-2.13"]
    assert m.default_minor == "2.13"  # default: the newest release
    cell = m.cell("2.12")
    assert cell.run_env() == {} and cell.build_env() == {} and cell.preload == ()
    assert m.backend.build.source == tmp_path / "src"
    assert m.backend.build.argv() == ["pip", "install", "."]
    assert cell.describe() == "Conformance suite on torch 2.12.1, my_npu."
    with pytest.raises(MatrixError, match="neither an allocator"):
        m.cell("2.12-guard")


def test_conformance_matrix_env_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONFORMANCE_MATRIX", str(tmp_path / "missing.toml"))
    with pytest.raises(MatrixError, match="missing.toml not found .set CONFORMANCE_MATRIX"):
        load_matrix()
    assert load_matrix(DEFAULT_MATRIX_PATH).backend.module == "echo_npu"


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


def test_a_labelled_backend_names_its_sessions_apart() -> None:
    xla = load_matrix(DEFAULT_MATRIX_PATH.parent / "xla.toml")
    assert xla.backend.label == "xla" and xla.backend.device == "xla"
    assert xla.sessions() == ["conformance-xla-2.9"]
    assert xla.cell("conformance-xla-2.9") == xla.cell("2.9") == xla.cell("")
    assert xla.cell("").run_env() == {"PJRT_DEVICE": "CPU"}
    assert xla.default_release.extra == ("torch_xla==2.9.0",)


def test_a_bad_label_is_one_line() -> None:
    with pytest.raises(MatrixError, match=r"\[backend\]\.label: 'X-LA' must be lowercase"):
        parse_matrix(_with(backend__label="X-LA"))


def test_the_compiled_axis_adds_one_compile_cell_per_covered_minor() -> None:
    """[compile]: conformance-<minor>-compile for the minors its specifier covers, default
    allocator and plain build, running the suite with the axis' --modes (CONFORMANCE_MODES)."""
    m = load_matrix()
    compiled = [s for s in m.sessions() if s.endswith("-compile")]
    assert compiled == [f"conformance-2.{n}-compile" for n in range(9, 16)]
    cell = m.cell("conformance-2.13-compile")
    assert cell.run_env()["CONFORMANCE_MODES"] == "grad,inference,sync,compile"
    assert (cell.allocator, cell.sanitizer) == ("malloc", "none")
    assert "CONFORMANCE_MODES" not in m.cell("2.13").run_env()
    with pytest.raises(MatrixError, match=r"does not cover torch 2\.5$"):
        m.cell("2.5-compile")
    assert not [s for s in parse_matrix(_with(compile=None)).sessions() if "compile" in s]


@pytest.mark.parametrize(
    ("compile_table", "fragment"),
    [
        ({"modes": "grad"}, "[compile].modes: 'grad' must include compile"),
        ({"torch": "2.9"}, "[compile].torch: '2.9' is not a version specifier"),
        ({"cells": 1}, "[compile]"),
    ],
)
def test_a_bad_compiled_axis_is_one_line(compile_table: dict, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(_with(compile=compile_table))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_world_size_axis_runs_the_collectives_family_alone() -> None:
    """[collectives] world_sizes: a <default minor>-world<N> cell per size, running
    conformance/collectives alone (default selection) at that world size."""
    from conformance.ci.build import suite_argv

    matrix = load_matrix(DEFAULT_MATRIX_PATH)
    worlds = [s for s in matrix.sessions() if "world" in s]
    assert worlds == [f"conformance-{matrix.default_minor}-world{n}" for n in (2, 4)]
    cell = matrix.cell(f"{matrix.default_minor}-world4")
    env = cell.run_env()
    assert env["CONFORMANCE_WORLD_SIZES"] == "4" and env["CONFORMANCE_COLLECTIVES_SET"] == "default"
    assert "conformance/collectives" in suite_argv(cell, Path("r"))
    assert "conformance" in suite_argv(matrix.cell(matrix.default_minor), Path("r"))
    with pytest.raises(MatrixError, match="does not cover torch 2.8"):
        matrix.cell("2.8-world4")
    data = tomllib.loads(DEFAULT_MATRIX_PATH.read_text())
    data["collectives"] = {"world_sizes": [1]}
    with pytest.raises(MatrixError, match="world_sizes"):
        parse_matrix(data, "m.toml", DEFAULT_MATRIX_PATH.parent)
