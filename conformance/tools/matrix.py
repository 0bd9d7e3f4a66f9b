"""The CI matrix: torch releases x allocator modes x sanitizers, loaded from matrices/matrix.toml.

``noxfile.py`` generates one session per :class:`Cell` (``conformance-2.8``,
``conformance-2.8-guard``, ``conformance-2.13-asan``, ...), and the nightly workflow takes its job
matrix from that session list, so this file is the one place a torch version is added.

Every problem with the file or with a requested cell raises :class:`MatrixError`, whose message is a
single line naming the valid choices or the fix, so that command-line front ends can print it
without a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
    "DEFAULT_MATRIX_PATH",
    "SESSION_PREFIX",
    "Cell",
    "Exclusion",
    "Matrix",
    "MatrixError",
    "Release",
    "load_matrix",
    "parse_matrix",
    "requested_sessions",
    "unknown_session_error",
]

DEFAULT_MATRIX_PATH = Path(__file__).resolve().parents[2] / "matrices" / "matrix.toml"
SESSION_PREFIX = "conformance-"
SCHEMA = 1
_MINOR_RE = re.compile(r"^\d+\.\d+$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


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
class Cell:
    """One point of the matrix: a torch release run with one allocator and one sanitizer."""

    release: Release
    allocator: str
    sanitizer: str
    default_allocator: str = "malloc"
    default_sanitizer: str = "none"

    @property
    def key(self) -> str:
        """The session name without its prefix: ``2.8``, ``2.8-guard``, ``2.13-aligned-asan``."""
        parts = [self.release.minor]
        if self.allocator != self.default_allocator:
            parts.append(self.allocator)
        if self.sanitizer != self.default_sanitizer:
            parts.append(self.sanitizer)
        return "-".join(parts)

    @property
    def session(self) -> str:
        """The nox session name, e.g. ``conformance-2.8-guard``."""
        return SESSION_PREFIX + self.key

    @property
    def asan(self) -> bool:
        """Whether the backend is built and run under AddressSanitizer."""
        return self.sanitizer == "asan"

    def describe(self) -> str:
        """A one-line description (used as the nox session docstring)."""
        text = f"Conformance suite on torch {self.release.version}, {self.allocator} allocator"
        if self.sanitizer != "none":
            text += f", built with {self.sanitizer.upper()}"
        return text + "."

    def build_env(self) -> dict[str, str]:
        """Environment variables for building the backend in this cell."""
        return {"ECHO_NPU_ASAN": "1"} if self.asan else {}

    def run_env(self) -> dict[str, str]:
        """Environment variables for running the suite in this cell (ASan preload not included)."""
        env = {"ECHO_NPU_ALLOCATOR": self.allocator}
        if self.asan:
            env["ASAN_OPTIONS"] = "detect_leaks=0"
        return env


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
    allocators: tuple[str, ...]
    default_allocator: str
    sanitizers: tuple[str, ...]
    default_sanitizer: str
    exclusions: tuple[Exclusion, ...] = ()
    source: str = field(default="matrices/matrix.toml", compare=False)

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

    def _cell(self, release: Release, allocator: str, sanitizer: str) -> Cell:
        return Cell(release, allocator, sanitizer, self.default_allocator, self.default_sanitizer)

    def cells(self) -> list[Cell]:
        """Every generated cell: releases oldest first, then allocators, then sanitizers."""
        out = []
        for rel in self.releases:
            for sanitizer in self.sanitizers:
                for allocator in self.allocators:
                    if self.exclusion(rel.minor, allocator, sanitizer) is None:
                        out.append(self._cell(rel, allocator, sanitizer))
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
        if not key:
            key = self.default_minor
        minor, *rest = key.split("-")
        release = self.release(minor)
        allocator, sanitizer = self.default_allocator, self.default_sanitizer
        for part in rest:
            if part in self.allocators and allocator == self.default_allocator:
                allocator = part
            elif part in self.sanitizers and sanitizer == self.default_sanitizer:
                sanitizer = part
            else:
                raise MatrixError(
                    f"unknown cell '{name}': '{part}' is neither an allocator "
                    f"({', '.join(self.allocators)}) nor a sanitizer "
                    f"({', '.join(self.sanitizers)}); cells look like "
                    f"{self.default_minor}, {self.default_minor}-guard, {self.default_minor}-asan"
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


def _modes(data: Mapping[str, Any], key: str, src: str) -> tuple[tuple[str, ...], str]:
    table = _table(data, key, src)
    _check_keys(table, ["default", "modes"], f"{src} [{key}]")
    modes = _str_list(table.get("modes"), f"{src} [{key}].modes")
    for mode in modes:
        if not _NAME_RE.match(mode):
            raise MatrixError(f"{src} [{key}].modes: '{mode}' must be lowercase [a-z0-9_]")
    if len(set(modes)) != len(modes):
        raise MatrixError(f"{src} [{key}].modes: duplicate entries in {list(modes)}")
    default = _str(table.get("default"), f"{src} [{key}].default")
    if default not in modes:
        raise MatrixError(
            f"{src} [{key}].default: '{default}' is not one of the modes ({', '.join(modes)})"
        )
    return modes, default


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


def parse_matrix(data: Mapping[str, Any], source: str = "matrix.toml") -> Matrix:
    """Validate the parsed TOML ``data`` and build a :class:`Matrix`."""
    src = source
    _check_keys(data, ["schema", "torch", "allocator", "sanitizer", "exclude"], src)
    if data.get("schema") != SCHEMA:
        raise MatrixError(f"{src}: expected schema = {SCHEMA}, got {data.get('schema')!r}")
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
    default = _str(torch.get("default"), f"{src} [torch].default")
    if default not in minors:
        raise MatrixError(
            f"{src} [torch].default: {default} is not a release (valid: {', '.join(minors)})"
        )
    python = torch.get("python")
    if python is not None:
        python = _str(python, f"{src} [torch].python")
    allocators, default_allocator = _modes(data, "allocator", src)
    sanitizers, default_sanitizer = _modes(data, "sanitizer", src)
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
        allocators=allocators,
        default_allocator=default_allocator,
        sanitizers=sanitizers,
        default_sanitizer=default_sanitizer,
        exclusions=exclusions,
        source=src,
    )
    if matrix.exclusion(default, default_allocator, default_sanitizer) is not None:
        raise MatrixError(f"{src}: an [[exclude]] entry removes the default cell {default}")
    return matrix


def load_matrix(path: str | os.PathLike[str] | None = None) -> Matrix:
    """Read and validate the matrix file (default: ``matrices/matrix.toml`` of this checkout)."""
    p = Path(path) if path is not None else DEFAULT_MATRIX_PATH
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(f"matrix file {p} not found") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{p}: invalid TOML: {exc}") from None
    return parse_matrix(data, _display(p))


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
    matrix: Matrix, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> str | None:
    """A one-line error if the nox command line asks for a ``conformance-*`` cell not generated.

    Returns ``None`` when every requested conformance session exists.
    """
    environ = os.environ if environ is None else environ
    known = set(matrix.sessions())
    for name in requested_sessions(argv, environ):
        if not name.startswith(SESSION_PREFIX) or name in known:
            continue
        try:
            cell = matrix.cell(name)
        except MatrixError as exc:
            return f"nox: {exc}"
        return f"nox: no session {name}; this cell's session is {cell.session}"
    return None
