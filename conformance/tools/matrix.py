"""The CI matrix: torch releases x the backend's allocator modes x sanitizer builds.

A matrix file (``matrices/matrix.toml`` for echo_npu, ``conformance-matrix.toml`` in a backend's own
repository) holds the torch releases, a :class:`Backend` description (module, how to build it into a
session's venv against that session's torch, allocator modes and how they are selected, sanitizer
builds, extra requirements) and excluded cells. :mod:`conformance.tools.sessions` generates one
nox session per :class:`Cell` (``conformance-2.8``, ``conformance-2.8-guard``,
``conformance-2.13-asan``, ...), the nightly workflow takes its job matrix from that session list
and the bisect builds the same backend, so this file is the one place a torch version is added.

Every problem with the file or with a requested cell raises :class:`MatrixError`, whose message is a
single line naming the valid choices or the fix, so that command-line front ends can print it
without a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from conformance.errors import ConformanceUsageError

__all__ = [
    "CONFORMANCE_MATRIX_ENV",
    "DEFAULT_MATRIX_PATH",
    "SESSION_PREFIX",
    "AllocatorSpec",
    "Backend",
    "BuildSpec",
    "Cell",
    "Exclusion",
    "Matrix",
    "MatrixError",
    "Release",
    "Sanitizer",
    "load_matrix",
    "matrix_path",
    "parse_matrix",
    "requested_sessions",
    "unknown_session_error",
]

DEFAULT_MATRIX_PATH = Path(__file__).resolve().parents[2] / "matrices" / "matrix.toml"
#: Environment variable naming the matrix file (nox sessions, bisect, rehearsal).
CONFORMANCE_MATRIX_ENV = "CONFORMANCE_MATRIX"
SESSION_PREFIX = "conformance-"
SCHEMA = 2
NO_SANITIZER = "none"
COMPILE_SUFFIX = "compile"  # the compiled axis' cells: conformance-<minor>-compile
DEFAULT_COMPILE_MODES = "grad,inference,sync,compile"
#: Preloads a sanitizer build may ask for at run time (see conformance/tools/launch.py).
PRELOADS = ("asan", "malloc-check")
_MINOR_RE = re.compile(r"^\d+\.\d+$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_SHARDS = 64  # jobs per cell in the nightly (GitHub allows 256 jobs per matrix)


class MatrixError(ConformanceUsageError, ValueError):
    """A bad matrix file or a cell that is not in the matrix; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


@dataclass(frozen=True)
class Release:
    """One torch release of the matrix: ``minor`` names sessions, ``version`` is installed."""

    minor: str
    version: str
    extra: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        """The pip requirement that installs exactly this release."""
        return f"torch=={self.version}"


@dataclass(frozen=True)
class BuildSpec:
    """How the backend is built into a venv: ``command`` runs in a fresh copy of ``source``.

    The copy holds ``include`` (relative paths; empty = the whole folder) minus ``exclude`` globs,
    so two torch versions never share compiled objects. ``watch`` (default: what is copied) is
    what the build fingerprint hashes: editing a watched file makes the next run rebuild.
    """

    source: Path
    command: str | tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        """The command as an argv: a string runs under ``sh -c``, a list as is."""
        if isinstance(self.command, str):
            return ["sh", "-c", self.command]
        return list(self.command)


@dataclass(frozen=True)
class AllocatorSpec:
    """The backend's allocator modes; ``env`` selects one at run time (None: a single mode)."""

    modes: tuple[str, ...] = ("default",)
    default: str = "default"
    env: str | None = None


@dataclass(frozen=True)
class Sanitizer:
    """A sanitizer build: extra build/run environment and runtime libraries to preload."""

    name: str
    build_env: Mapping[str, str] = field(default_factory=dict)
    run_env: Mapping[str, str] = field(default_factory=dict)
    preload: tuple[str, ...] = ()


@dataclass(frozen=True)
class Backend:
    """The backend under test and how to build it against a session's torch."""

    module: str
    build: BuildSpec
    allocator: AllocatorSpec = field(default_factory=AllocatorSpec)
    sanitizers: tuple[Sanitizer, ...] = ()
    device: str | None = None
    requires: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    expectations: Path | None = None
    fault_env: str | None = None
    # names this matrix's sessions apart when one noxfile registers several matrix files:
    # conformance-<label>-<minor> (a lazy device's matrix beside echo_npu's: label "xla")
    label: str | None = None

    def sanitizer(self, name: str) -> Sanitizer:
        """The sanitizer build ``name`` (``none``: the plain build)."""
        for san in self.sanitizers:
            if san.name == name:
                return san
        return Sanitizer(NO_SANITIZER)

    def expectation_files(self, minor: str) -> list[Path]:
        """``<expectations>/common.toml`` and ``torch-<minor>.toml``, those that exist."""
        if self.expectations is None:
            return []
        names = ("common.toml", f"torch-{minor}.toml")
        return [self.expectations / n for n in names if (self.expectations / n).is_file()]


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: a torch release run with one allocator and one sanitizer."""

    release: Release
    allocator: str
    sanitizer: str
    default_allocator: str = "default"
    default_sanitizer: str = NO_SANITIZER
    backend: Backend | None = field(default=None, compare=False, repr=False)
    # the compiled axis ([compile]): the suite's --modes in this cell, "" for the plain cells
    modes: str = ""

    @property
    def key(self) -> str:
        """The session name without its prefix: ``2.8``, ``2.8-guard``, ``2.13-aligned-asan``,
        ``2.13-compile``."""
        parts = [self.release.minor]
        if self.allocator != self.default_allocator:
            parts.append(self.allocator)
        if self.sanitizer != self.default_sanitizer:
            parts.append(self.sanitizer)
        if self.modes:
            parts.append(COMPILE_SUFFIX)
        return "-".join(parts)

    @property
    def session(self) -> str:
        """The nox session name, e.g. ``conformance-2.8-guard`` (``conformance-xla-2.9`` for a
        matrix whose backend has a label)."""
        label = self.backend.label if self.backend is not None else None
        return SESSION_PREFIX + (f"{label}-" if label else "") + self.key

    @property
    def asan(self) -> bool:
        """Whether this cell's sanitizer build preloads the ASan runtime."""
        return "asan" in self.preload

    @property
    def preload(self) -> tuple[str, ...]:
        """Runtime libraries preloaded when the suite runs (``asan``, ``malloc-check``)."""
        return self.backend.sanitizer(self.sanitizer).preload if self.backend else ()

    def describe(self) -> str:
        """A one-line description (used as the nox session docstring)."""
        module = self.backend.module if self.backend else "the backend"
        text = f"Conformance suite on torch {self.release.version}, {module}"
        if self.allocator != "default":
            text += f", {self.allocator} allocator"
        if self.sanitizer != NO_SANITIZER:
            text += f", built with {self.sanitizer.upper()}"
        if self.modes:
            text += f", compiled paths (--modes {self.modes})"
        return text + "."

    def build_env(self) -> dict[str, str]:
        """Environment variables for building the backend in this cell."""
        if self.backend is None:
            return {}
        return {**self.backend.build.env, **self.backend.sanitizer(self.sanitizer).build_env}

    def run_env(self) -> dict[str, str]:
        """Environment variables for running the suite in this cell (preloads not included)."""
        if self.backend is None:
            return {}
        env = dict(self.backend.env)
        if self.backend.allocator.env:
            env[self.backend.allocator.env] = self.allocator
        env.update(self.backend.sanitizer(self.sanitizer).run_env)
        if self.modes:
            env["CONFORMANCE_MODES"] = self.modes
        return env


@dataclass(frozen=True)
class CompileAxis:
    """[compile]: cells ``<minor>-compile`` (default allocator, plain build) that run the suite
    with ``modes`` (the -compile cases, the AOTInductor scenarios), for the minors in ``torch``."""

    modes: str = DEFAULT_COMPILE_MODES
    torch: SpecifierSet | None = None

    def covers(self, minor: str) -> bool:
        return self.torch is None or Version(minor) in self.torch


@dataclass(frozen=True)
class Exclusion:
    """Cells matching every given key are not generated; ``None`` matches anything."""

    reason: str
    torch: SpecifierSet | frozenset[str] | None = None
    allocator: frozenset[str] | None = None
    sanitizer: frozenset[str] | None = None

    def matches(self, minor: str, allocator: str, sanitizer: str) -> bool:
        """Whether this exclusion removes the cell (minor, allocator, sanitizer)."""
        if isinstance(self.torch, SpecifierSet):
            if Version(minor) not in self.torch:
                return False
        elif self.torch is not None and minor not in self.torch:
            return False
        if self.allocator is not None and allocator not in self.allocator:
            return False
        return self.sanitizer is None or sanitizer in self.sanitizer


@dataclass(frozen=True)
class Matrix:
    """The validated matrix; releases are ordered oldest first."""

    releases: tuple[Release, ...]
    default_minor: str
    python: str | None
    backend: Backend
    exclusions: tuple[Exclusion, ...] = ()
    shards: int = 1  # [nightly].shards: jobs per cell in the nightly, merged by its report
    compiled: CompileAxis | None = None  # [compile]: the compiled axis, if the file has one
    source: str = field(default="matrices/matrix.toml", compare=False)
    path: Path | None = field(default=None, compare=False)

    @property
    def allocators(self) -> tuple[str, ...]:
        """The backend's allocator modes."""
        return self.backend.allocator.modes

    @property
    def default_allocator(self) -> str:
        """The allocator of the plain cells (no suffix in session names)."""
        return self.backend.allocator.default

    @property
    def sanitizers(self) -> tuple[str, ...]:
        """``none`` and the backend's sanitizer builds."""
        return (NO_SANITIZER, *(s.name for s in self.backend.sanitizers))

    @property
    def default_sanitizer(self) -> str:
        """The sanitizer of the plain cells: ``none``."""
        return NO_SANITIZER

    @property
    def minors(self) -> list[str]:
        """The torch minors, oldest first."""
        return [r.minor for r in self.releases]

    @property
    def default_release(self) -> Release:
        """The release of the default torch minor."""
        return self.release(self.default_minor)

    def valid_versions(self) -> str:
        """The valid minors as a comma-separated string, for error messages."""
        return ", ".join(self.minors)

    def release(self, minor: str) -> Release:
        """The release of ``minor``; :class:`MatrixError` naming the valid ones if absent."""
        for rel in self.releases:
            if rel.minor == minor:
                return rel
        raise MatrixError(
            f"torch {minor} is not in the matrix {self.source} "
            f"(valid: {self.valid_versions()}); add a [[torch.release]] entry to add it"
        )

    def exclusion(self, minor: str, allocator: str, sanitizer: str) -> Exclusion | None:
        """The first exclusion that removes this cell, or ``None``."""
        for exc in self.exclusions:
            if exc.matches(minor, allocator, sanitizer):
                return exc
        return None

    def _cell(self, release: Release, allocator: str, sanitizer: str, modes: str = "") -> Cell:
        return Cell(
            release,
            allocator,
            sanitizer,
            self.default_allocator,
            self.default_sanitizer,
            backend=self.backend,
            modes=modes,
        )

    def _compiled_cell(self, release: Release) -> Cell | None:
        """The release's ``-compile`` cell, where the [compile] axis covers it."""
        if self.compiled is None or not self.compiled.covers(release.minor):
            return None
        allocator, sanitizer = self.default_allocator, self.default_sanitizer
        return self._cell(release, allocator, sanitizer, self.compiled.modes)

    def cells(self) -> list[Cell]:
        """Every generated cell: releases oldest first, then sanitizers, then allocators, then
        the release's -compile cell."""
        out = []
        for rel in self.releases:
            for sanitizer in self.sanitizers:
                for allocator in self.allocators:
                    if self.exclusion(rel.minor, allocator, sanitizer) is None:
                        out.append(self._cell(rel, allocator, sanitizer))
            compiled = self._compiled_cell(rel)
            if compiled is not None:
                out.append(compiled)
        return out

    def sessions(self) -> list[str]:
        """The nox session names of :meth:`cells`."""
        return [c.session for c in self.cells()]

    def cell(self, name: str) -> Cell:
        """Parse ``2.8``, ``2.8-guard``, ``conformance-2.13-asan`` ... into a generated cell.

        An empty name means the default cell. Raises :class:`MatrixError` naming the valid choices.
        """
        key = name.strip()
        if key.startswith(SESSION_PREFIX):
            key = key[len(SESSION_PREFIX) :]
        label = self.backend.label
        if label and key.startswith(f"{label}-"):
            key = key[len(label) + 1 :]
        if not key:
            key = self.default_minor
        minor, *rest = key.split("-")
        release = self.release(minor)
        allocator, sanitizer = self.default_allocator, self.default_sanitizer
        if rest == [COMPILE_SUFFIX] and self.compiled is not None:
            compiled = self._compiled_cell(release)
            if compiled is None:
                raise MatrixError(
                    f"cell '{name}': the [compile] axis of {self.source} does not cover torch "
                    f"{release.minor}"
                )
            return compiled
        for part in rest:
            if part in self.allocators and allocator == self.default_allocator:
                allocator = part
            elif part in self.sanitizers and sanitizer == self.default_sanitizer:
                sanitizer = part
            else:
                examples = [self.default_minor]
                examples += [f"{self.default_minor}-{a}" for a in self.allocators[1:2]]
                examples += [f"{self.default_minor}-{s}" for s in self.sanitizers[1:2]]
                raise MatrixError(
                    f"unknown cell '{name}': '{part}' is neither an allocator "
                    f"({', '.join(self.allocators)}) nor a sanitizer "
                    f"({', '.join(self.sanitizers)}); cells look like {', '.join(examples)}"
                )
        exc = self.exclusion(release.minor, allocator, sanitizer)
        if exc is not None:
            raise MatrixError(f"cell '{name}' is excluded by {self.source}: {exc.reason}")
        return self._cell(release, allocator, sanitizer)


# ---------------------------------------------------------------------------------------------
# Parsing and validation


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


def _compile_axis(data: Mapping[str, Any], src: str) -> CompileAxis | None:
    """[compile]: the compiled axis (optional)."""
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
    return CompileAxis(modes=modes, torch=torch)


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


def _exclusion(
    entry: Any,
    index: int,
    src: str,
    minors: Sequence[str],
    allocators: Sequence[str],
    sanitizers: Sequence[str],
) -> Exclusion:
    where = f"{src} [[exclude]] #{index + 1}"
    if not isinstance(entry, Mapping):
        raise MatrixError(f"{where}: expected a table")
    _check_keys(entry, ["torch", "allocator", "sanitizer", "reason"], where)
    reason = _str(entry.get("reason"), f"{where}.reason (every exclusion needs a reason)")
    if not any(k in entry for k in ("torch", "allocator", "sanitizer")):
        raise MatrixError(f"{where}: give at least one of torch, allocator, sanitizer")

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
        torch = names("torch", minors)
    return Exclusion(
        reason=reason,
        torch=torch,
        allocator=names("allocator", allocators),
        sanitizer=names("sanitizer", sanitizers),
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
    _check_keys(data, ["schema", "torch", "backend", "exclude", "nightly", "compile"], src)
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
    allocators = backend.allocator.modes
    sanitizers = (NO_SANITIZER, *(s.name for s in backend.sanitizers))
    raw_exclusions = data.get("exclude", [])
    if not isinstance(raw_exclusions, list):
        raise MatrixError(f"{src}: 'exclude' must be an array of tables ([[exclude]])")
    exclusions = tuple(
        _exclusion(e, i, src, minors, allocators, sanitizers) for i, e in enumerate(raw_exclusions)
    )
    matrix = Matrix(
        releases=tuple(releases),
        default_minor=default,
        python=python,
        backend=backend,
        exclusions=exclusions,
        shards=_nightly(data, src),
        compiled=_compile_axis(data, src),
        source=src,
    )
    if matrix.exclusion(default, matrix.default_allocator, NO_SANITIZER) is not None:
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


# ---------------------------------------------------------------------------------------------
# Command-line helpers


def requested_sessions(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """Session names a nox command line asks for (``-s``/``-e``/``--session(s)``, NOXSESSION)."""
    out: list[str] = []
    flags = {"-s", "-e", "--session", "--sessions"}
    i = 0
    args = list(argv)
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg in flags:
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                out.append(args[i])
                i += 1
            continue
        for flag in ("--session=", "--sessions=", "-s=", "-e="):
            if arg.startswith(flag):
                out.append(arg[len(flag) :])
        if arg.startswith("-s") and len(arg) > 2 and not arg.startswith("-s="):
            out.append(arg[2:])
        i += 1
    if not out and environ.get("NOXSESSION"):
        out = [s for s in environ["NOXSESSION"].split(",") if s]
    return out


def unknown_session_error(
    matrix: Matrix,
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    known: Sequence[str] = (),
) -> str | None:
    """A one-line error if the nox command line asks for a ``conformance-*`` cell not generated
    (``known``: sessions registered from other matrix files).

    Returns ``None`` when every requested conformance session exists.
    """
    environ = os.environ if environ is None else environ
    known = set(matrix.sessions()) | set(known)
    for name in requested_sessions(argv, environ):
        if not name.startswith(SESSION_PREFIX) or name in known:
            continue
        try:
            cell = matrix.cell(name)
        except MatrixError as exc:
            return f"nox: {exc}"
        return f"nox: no session {name}; this cell's session is {cell.session}"
    return None
