"""Read and validate a matrix file into a :class:`~conformance.ci.matrix.Matrix`.

:func:`load_matrix` reads ``matrices/matrix.toml`` (or the file ``$CONFORMANCE_MATRIX`` or the
caller names: a backend repository's ``conformance-matrix.toml``), :func:`parse_matrix` validates
parsed TOML: the schema, the torch releases, [[exclude]], [nightly], [compile] and [collectives]
here, the [backend] table in :mod:`conformance.ci.matrix_backend`. Each check raises
:class:`~conformance.ci.matrix_spec.MatrixError` with one line that names the key, the valid
choices and the fix (docs/MATRIX.md documents the format).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from conformance.ci.matrix import CROSSED, Exclusion, Matrix
from conformance.ci.matrix_backend import parse_backend
from conformance.ci.matrix_spec import (
    DEFAULT_COMPILE_MODES,
    CollectivesSpec,
    CompileSpec,
    MatrixError,
    Release,
)
from conformance.ci.matrix_values import check_keys, nonempty_str, required_table, str_list

__all__ = [
    "CONFORMANCE_MATRIX_ENV",
    "DEFAULT_MATRIX_PATH",
    "MAX_SHARDS",
    "load_matrix",
    "matrix_path",
    "parse_matrix",
    "parse_shards",
]

DEFAULT_MATRIX_PATH = Path(__file__).resolve().parents[2] / "matrices" / "matrix.toml"
#: Environment variable naming the matrix file (nox sessions, bisect, rehearsal).
CONFORMANCE_MATRIX_ENV = "CONFORMANCE_MATRIX"
SCHEMA = 2
_MINOR_RE = re.compile(r"^\d+\.\d+$")
MAX_SHARDS = 64  # jobs per cell in the nightly (GitHub allows 256 jobs per matrix)


def parse_shards(value: Any, where: str) -> int:
    """A number of shards: a whole number from 1 to MAX_SHARDS."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_SHARDS:
        raise MatrixError(f"{where}: give a whole number from 1 to {MAX_SHARDS}, got {value!r}")
    return int(text)


def _nightly(data: Mapping[str, Any], src: str) -> int:
    """[nightly]: how many shards (jobs) each cell runs as; 1 without the table."""
    table = data.get("nightly", {})
    if not isinstance(table, Mapping):
        raise MatrixError(f"{src}: 'nightly' must be a table ([nightly])")
    check_keys(table, ["shards"], f"{src} [nightly]")
    return parse_shards(table.get("shards", 1), f"{src} [nightly].shards")


def _compile_spec(data: Mapping[str, Any], src: str) -> CompileSpec | None:
    """[compile]: the compiled axis' settings (optional)."""
    if "compile" not in data:
        return None
    table = data["compile"]
    where = f"{src} [compile]"
    if not isinstance(table, Mapping):
        raise MatrixError(f"{src}: 'compile' must be a table ([compile])")
    check_keys(table, ["torch", "modes"], where)
    modes = nonempty_str(table.get("modes", DEFAULT_COMPILE_MODES), f"{where}.modes")
    if "compile" not in [m.strip() for m in modes.split(",")]:
        raise MatrixError(f"{where}.modes: '{modes}' must include compile")
    torch = None
    if "torch" in table:
        raw = nonempty_str(table["torch"], f"{where}.torch")
        try:
            torch = SpecifierSet(raw)
        except InvalidSpecifier:
            raise MatrixError(
                f"{where}.torch: '{raw}' is not a version specifier (e.g. \">=2.9\")"
            ) from None
    return CompileSpec(modes=modes, torch=torch)


def _collectives_spec(data: Mapping[str, Any], src: str) -> CollectivesSpec | None:
    """[collectives]: the world-size axis' values (optional)."""
    if "collectives" not in data:
        return None
    table = data["collectives"]
    where = f"{src} [collectives]"
    if not isinstance(table, Mapping):
        raise MatrixError(f"{src}: 'collectives' must be a table ([collectives])")
    check_keys(table, ["world_sizes"], where)
    sizes = table.get("world_sizes", [2, 4])
    ok = isinstance(sizes, list) and sizes and all(type(n) is int and n >= 2 for n in sizes)
    if not ok:
        raise MatrixError(f"{where}.world_sizes: give a list of world sizes >= 2, e.g. [2, 4]")
    return CollectivesSpec(world_sizes=tuple(dict.fromkeys(sizes)))


def _release(entry: Any, index: int, src: str) -> Release:
    where = f"{src} [[torch.release]] #{index + 1}"
    if not isinstance(entry, Mapping):
        raise MatrixError(f"{where}: expected a table")
    check_keys(entry, ["minor", "version", "extra"], where)
    minor = nonempty_str(entry.get("minor"), f"{where}.minor")
    if not _MINOR_RE.match(minor):
        raise MatrixError(f"{where}.minor: '{minor}' must look like 2.8 (major.minor)")
    version = nonempty_str(entry.get("version"), f"{where}.version")
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise MatrixError(f"{where}.version: '{version}' is not a valid version") from None
    if ".".join(map(str, parsed.release[:2])) != minor:
        raise MatrixError(f"{where}: version {version} does not belong to minor {minor}")
    extra = entry.get("extra", [])
    if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
        raise MatrixError(f"{where}.extra: expected a list of requirement strings")
    return Release(minor=minor, version=version, extra=tuple(extra))


def _exclusion(entry: Any, index: int, src: str, matrix: Matrix) -> Exclusion:
    """An [[exclude]] entry: keys ``torch``, one per crossed axis (allocator, sanitizer), reason."""
    where = f"{src} [[exclude]] #{index + 1}"
    if not isinstance(entry, Mapping):
        raise MatrixError(f"{where}: expected a table")
    keys = ["torch", *(a.name for a in CROSSED)]
    check_keys(entry, [*keys, "reason"], where)
    reason = nonempty_str(entry.get("reason"), f"{where}.reason (every exclusion needs a reason)")
    if not any(k in entry for k in keys):
        raise MatrixError(f"{where}: give at least one of {', '.join(keys)}")

    def names(key: str, valid: Sequence[str]) -> frozenset[str] | None:
        if key not in entry:
            return None
        values = str_list(entry[key], f"{where}.{key}")
        for v in values:
            if v not in valid:
                raise MatrixError(f"{where}.{key}: '{v}' is not one of {', '.join(valid)}")
        return frozenset(values)

    torch: SpecifierSet | frozenset[str] | None = None
    raw = entry.get("torch")
    if isinstance(raw, str) and raw and raw[0] in "<>=!~":
        try:
            torch = SpecifierSet(raw)
        except InvalidSpecifier:
            raise MatrixError(f"{where}.torch: '{raw}' is not a valid version specifier") from None
    else:
        torch = names("torch", matrix.minors)
    values = {a.name: names(a.name, a.values(matrix)) for a in CROSSED}
    return Exclusion(
        reason=reason,
        torch=torch,
        values={name: excluded for name, excluded in values.items() if excluded is not None},
    )


def parse_matrix(
    data: Mapping[str, Any],
    source: str = "matrix.toml",
    base_dir: str | os.PathLike[str] | None = None,
) -> Matrix:
    """Validate the parsed TOML ``data`` and build a :class:`Matrix`.

    Relative paths of the backend description start at ``base_dir`` (the matrix file's folder;
    default: ``matrices/`` of this checkout).
    """
    src = source
    base = Path(base_dir) if base_dir is not None else DEFAULT_MATRIX_PATH.parent
    keys = ["schema", "torch", "backend", "exclude", "nightly", "compile", "collectives"]
    check_keys(data, keys, src)
    if data.get("schema") != SCHEMA:
        hint = ""
        if data.get("schema") == 1:
            hint = (
                " (schema 2 moved [allocator] and [sanitizer] into [backend]; see docs/MATRIX.md)"
            )
        raise MatrixError(f"{src}: expected schema = {SCHEMA}, got {data.get('schema')!r}{hint}")
    torch = required_table(data, "torch", src)
    check_keys(torch, ["default", "python", "release"], f"{src} [torch]")
    entries = torch.get("release")
    if not isinstance(entries, list) or not entries:
        raise MatrixError(f"{src}: add at least one [[torch.release]] entry")
    releases = [_release(e, i, src) for i, e in enumerate(entries)]
    seen: set[str] = set()
    for rel in releases:
        if rel.minor in seen:
            raise MatrixError(f"{src}: torch minor {rel.minor} is listed twice")
        seen.add(rel.minor)
    releases.sort(key=lambda r: Version(r.minor))
    minors = [r.minor for r in releases]
    default = nonempty_str(torch.get("default", minors[-1]), f"{src} [torch].default")
    if default not in minors:
        raise MatrixError(
            f"{src} [torch].default: {default} is not a release (valid: {', '.join(minors)})"
        )
    python = torch.get("python")
    if python is not None:
        python = nonempty_str(python, f"{src} [torch].python")
    backend = parse_backend(data, src, base)
    matrix = Matrix(
        releases=tuple(releases), default_minor=default, python=python, backend=backend, source=src
    )
    raw_exclusions = data.get("exclude", [])
    if not isinstance(raw_exclusions, list):
        raise MatrixError(f"{src}: 'exclude' must be an array of tables ([[exclude]])")
    exclusions = tuple(_exclusion(e, i, src, matrix) for i, e in enumerate(raw_exclusions))
    matrix = replace(
        matrix,
        exclusions=exclusions,
        shards=_nightly(data, src),
        compiled=_compile_spec(data, src),
        collectives=_collectives_spec(data, src),
    )
    if matrix.exclusion(default, matrix.plain_values) is not None:
        raise MatrixError(f"{src}: an [[exclude]] entry removes the default cell {default}")
    return matrix


def matrix_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The matrix file to use: ``path``, else ``$CONFORMANCE_MATRIX``, else this checkout's."""
    chosen = path or os.environ.get(CONFORMANCE_MATRIX_ENV) or DEFAULT_MATRIX_PATH
    return Path(chosen).expanduser().resolve()


def load_matrix(path: str | os.PathLike[str] | None = None) -> Matrix:
    """Read and validate a matrix file (default: :func:`matrix_path`)."""
    p = matrix_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(
            f"matrix file {p} not found (set {CONFORMANCE_MATRIX_ENV} or pass the path)"
        ) from None
    except IsADirectoryError:
        raise MatrixError(f"matrix file {p} is a folder; name the .toml file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{p}: invalid TOML: {exc}") from None
    matrix = parse_matrix(data, _display(p), p.parent)
    return replace(matrix, path=p)


def _display(path: Path) -> str:
    """``path`` relative to the checkout when inside it (shorter error messages)."""
    try:
        return str(path.resolve().relative_to(DEFAULT_MATRIX_PATH.parent.parent))
    except ValueError:
        return str(path)
