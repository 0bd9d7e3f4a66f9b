"""Read and validate a matrix file into a :class:`~conformance.ci.matrix.Matrix`.

:func:`load_matrix` reads ``matrices/matrix.toml`` (or the file ``$CONFORMANCE_MATRIX`` or the
caller names: a backend repository's ``conformance-matrix.toml``), :func:`parse_matrix` validates
parsed TOML. Each check raises :class:`~conformance.ci.matrix_spec.MatrixError` with one line that
names the key, the valid choices and the fix (docs/MATRIX.md documents the format).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
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
from conformance.ci.matrix_spec import (
    DEFAULT_COMPILE_MODES,
    NO_SANITIZER,
    PRELOADS,
    AllocatorSpec,
    Backend,
    BuildSpec,
    CollectivesSpec,
    CompileSpec,
    MatrixError,
    Release,
    Sanitizer,
)

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
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_SHARDS = 64  # jobs per cell in the nightly (GitHub allows 256 jobs per matrix)


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise MatrixError(f"{where}: missing table [{key}]")
    return value


def _check_keys(data: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    for key in data:
        if key not in allowed:
            raise MatrixError(
                f"{where}: unknown key '{key}' (expected one of: {', '.join(allowed)})"
            )


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise MatrixError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise MatrixError(f"{where}: expected a string or a non-empty list of strings")
    return tuple(_str(v, where) for v in value)


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
    _check_keys(table, ["shards"], f"{src} [nightly]")
    return parse_shards(table.get("shards", 1), f"{src} [nightly].shards")


def _compile_spec(data: Mapping[str, Any], src: str) -> CompileSpec | None:
    """[compile]: the compiled axis' settings (optional)."""
    if "compile" not in data:
        return None
    table = data["compile"]
    where = f"{src} [compile]"
    if not isinstance(table, Mapping):
        raise MatrixError(f"{src}: 'compile' must be a table ([compile])")
    _check_keys(table, ["torch", "modes"], where)
    modes = _str(table.get("modes", DEFAULT_COMPILE_MODES), f"{where}.modes")
    if "compile" not in [m.strip() for m in modes.split(",")]:
        raise MatrixError(f"{where}.modes: '{modes}' must include compile")
    torch = None
    if "torch" in table:
        raw = _str(table["torch"], f"{where}.torch")
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
    _check_keys(table, ["world_sizes"], where)
    sizes = table.get("world_sizes", [2, 4])
    ok = isinstance(sizes, list) and sizes and all(type(n) is int and n >= 2 for n in sizes)
    if not ok:
        raise MatrixError(f"{where}.world_sizes: give a list of world sizes >= 2, e.g. [2, 4]")
    return CollectivesSpec(world_sizes=tuple(dict.fromkeys(sizes)))


def _release(entry: Any, index: int, src: str) -> Release:
    where = f"{src} [[torch.release]] #{index + 1}"
    if not isinstance(entry, Mapping):
        raise MatrixError(f"{where}: expected a table")
    _check_keys(entry, ["minor", "version", "extra"], where)
    minor = _str(entry.get("minor"), f"{where}.minor")
    if not _MINOR_RE.match(minor):
        raise MatrixError(f"{where}.minor: '{minor}' must look like 2.8 (major.minor)")
    version = _str(entry.get("version"), f"{where}.version")
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
    _check_keys(entry, [*keys, "reason"], where)
    reason = _str(entry.get("reason"), f"{where}.reason (every exclusion needs a reason)")
    if not any(k in entry for k in keys):
        raise MatrixError(f"{where}: give at least one of {', '.join(keys)}")

    def names(key: str, valid: Sequence[str]) -> frozenset[str] | None:
        if key not in entry:
            return None
        values = _str_list(entry[key], f"{where}.{key}")
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


def _env_table(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MatrixError(f'{where}: expected a table of strings, e.g. {{ NAME = "value" }}')
    out = {}
    for key, val in value.items():
        if not _ENV_RE.match(str(key)):
            raise MatrixError(f"{where}: '{key}' is not an environment variable name")
        if not isinstance(val, str):
            raise MatrixError(f'{where}.{key}: expected a string, e.g. {key} = "{val}"')
        out[str(key)] = val
    return out


def _opt_list(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise MatrixError(f'{where}: expected a list of strings, e.g. ["a", "b"]')
    return tuple(value)


def _env_name(value: Any, where: str) -> str | None:
    if value is None:
        return None
    name = _str(value, where)
    if not _ENV_RE.match(name):
        raise MatrixError(f"{where}: '{name}' is not an environment variable name")
    return name


def _build(data: Any, src: str, base: Path) -> BuildSpec:
    where = f"{src} [backend.build]"
    if not isinstance(data, Mapping):
        raise MatrixError(
            f'{where}: missing; add [backend.build] with command = "..." that builds and '
            "installs the backend into the active venv (see docs/MATRIX.md)"
        )
    _check_keys(data, ["source", "command", "include", "exclude", "watch", "env"], where)
    raw = data.get("command")
    command: str | tuple[str, ...]
    if isinstance(raw, str) and raw.strip():
        command = raw.strip()
    elif isinstance(raw, list) and raw and all(isinstance(x, str) and x for x in raw):
        command = tuple(raw)
    else:
        raise MatrixError(
            f"{where}.command: expected a shell command string or an argv list, e.g. "
            'command = "pip install --no-build-isolation ." (it runs in a fresh copy of source)'
        )
    source = (base / _str(data.get("source", "."), f"{where}.source")).resolve()
    if not source.is_dir():
        raise MatrixError(
            f"{where}.source: folder {source} does not exist (relative paths start at the "
            "matrix file's folder)"
        )
    include = _opt_list(data.get("include"), f"{where}.include")
    for name in include:
        if not (source / name).exists():
            raise MatrixError(f"{where}.include: '{name}' not found in {source}; remove it")
    watch = _opt_list(data.get("watch"), f"{where}.watch")
    for name in watch:
        if not (source / name).exists():
            raise MatrixError(f"{where}.watch: '{name}' not found in {source}; remove it")
    return BuildSpec(
        source=source,
        command=command,
        include=include,
        exclude=_opt_list(data.get("exclude"), f"{where}.exclude"),
        watch=watch,
        env=_env_table(data.get("env"), f"{where}.env"),
    )


def _allocator(data: Any, src: str) -> AllocatorSpec:
    where = f"{src} [backend.allocator]"
    if data is None:
        return AllocatorSpec()
    if not isinstance(data, Mapping):
        raise MatrixError(f"{where}: expected a table with env, default, modes")
    _check_keys(data, ["env", "default", "modes"], where)
    modes = _str_list(data.get("modes"), f"{where}.modes")
    for mode in modes:
        if not _NAME_RE.match(mode):
            raise MatrixError(f"{where}.modes: '{mode}' must be lowercase [a-z0-9_]")
    if len(set(modes)) != len(modes):
        raise MatrixError(f"{where}.modes: duplicate entries in {list(modes)}")
    default = _str(data.get("default", modes[0]), f"{where}.default")
    if default not in modes:
        raise MatrixError(
            f"{where}.default: '{default}' is not one of the modes ({', '.join(modes)})"
        )
    env = _env_name(data.get("env"), f"{where}.env")
    if env is None and len(modes) > 1:
        raise MatrixError(
            f"{where}.env: {len(modes)} modes need the environment variable that selects "
            'one, e.g. env = "MY_NPU_ALLOCATOR"'
        )
    return AllocatorSpec(modes=modes, default=default, env=env)


def _sanitizers(data: Any, src: str) -> tuple[Sanitizer, ...]:
    where = f"{src} [backend.sanitizers]"
    if data is None:
        return ()
    if not isinstance(data, Mapping):
        raise MatrixError(f"{where}: expected one table per build, e.g. [backend.sanitizers.asan]")
    out = []
    for name, spec in data.items():
        at = f"{src} [backend.sanitizers.{name}]"
        if not _NAME_RE.match(name) or name == NO_SANITIZER:
            raise MatrixError(f"{at}: the name must be lowercase [a-z0-9_] and not '{name}'")
        if not isinstance(spec, Mapping):
            raise MatrixError(f"{at}: expected a table with build_env, run_env, preload")
        _check_keys(spec, ["build_env", "run_env", "preload"], at)
        preload = _opt_list(spec.get("preload"), f"{at}.preload")
        for lib in preload:
            if lib not in PRELOADS:
                raise MatrixError(f"{at}.preload: '{lib}' is not one of {', '.join(PRELOADS)}")
        out.append(
            Sanitizer(
                name=name,
                build_env=_env_table(spec.get("build_env"), f"{at}.build_env"),
                run_env=_env_table(spec.get("run_env"), f"{at}.run_env"),
                preload=preload,
            )
        )
    return tuple(out)


def _backend(data: Mapping[str, Any], src: str, base: Path) -> Backend:
    where = f"{src} [backend]"
    table = data.get("backend")
    if not isinstance(table, Mapping):
        raise MatrixError(
            f'{src}: missing table [backend]; describe the backend under test (module = "...", '
            "[backend.build] command = ...), see docs/MATRIX.md"
        )
    allowed = ["module", "device", "requires", "env", "expectations", "fault_env", "label"]
    _check_keys(table, [*allowed, "build", "allocator", "sanitizers"], where)
    module = _str(table.get("module"), f"{where}.module (the module whose import registers it)")
    if not _MODULE_RE.match(module):
        raise MatrixError(f"{where}.module: '{module}' is not an importable module name")
    device = table.get("device")
    if device is not None:
        device = _str(device, f"{where}.device")
    expectations = None
    if table.get("expectations") is not None:
        raw = _str(table["expectations"], f"{where}.expectations")
        expectations = (base / raw).resolve()
        if not expectations.is_dir():
            raise MatrixError(
                f"{where}.expectations: folder {expectations} does not exist (it holds "
                "common.toml and torch-<minor>.toml; remove the key if you have none)"
            )
    return Backend(
        module=module,
        build=_build(table.get("build"), src, base),
        allocator=_allocator(table.get("allocator"), src),
        sanitizers=_sanitizers(table.get("sanitizers"), src),
        device=device,
        requires=_opt_list(table.get("requires"), f"{where}.requires"),
        env=_env_table(table.get("env"), f"{where}.env"),
        expectations=expectations,
        fault_env=_env_name(table.get("fault_env"), f"{where}.fault_env"),
        label=_label(table.get("label"), f"{where}.label"),
    )


def _label(value: Any, where: str) -> str | None:
    if value is None:
        return None
    label = _str(value, where)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", label):
        raise MatrixError(f"{where}: '{label}' must be lowercase letters, digits and '_' (xla)")
    return label


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
    _check_keys(data, keys, src)
    if data.get("schema") != SCHEMA:
        hint = ""
        if data.get("schema") == 1:
            hint = (
                " (schema 2 moved [allocator] and [sanitizer] into [backend]; see docs/MATRIX.md)"
            )
        raise MatrixError(f"{src}: expected schema = {SCHEMA}, got {data.get('schema')!r}{hint}")
    torch = _table(data, "torch", src)
    _check_keys(torch, ["default", "python", "release"], f"{src} [torch]")
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
    default = _str(torch.get("default", minors[-1]), f"{src} [torch].default")
    if default not in minors:
        raise MatrixError(
            f"{src} [torch].default: {default} is not a release (valid: {', '.join(minors)})"
        )
    python = torch.get("python")
    if python is not None:
        python = _str(python, f"{src} [torch].python")
    backend = _backend(data, src, base)
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
