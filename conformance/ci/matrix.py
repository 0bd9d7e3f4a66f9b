"""The CI matrix: torch releases x the axes of :data:`~conformance.ci.axes.AXES`, minus exclusions.

A :class:`Matrix` (read by :mod:`conformance.ci.matrix_file`) generates one :class:`Cell` per
session: ``conformance-2.8``, ``conformance-2.8-guard``, ``conformance-2.13-asan``,
``conformance-2.13-compile``. :mod:`conformance.ci.sessions` registers a nox session per cell, the
nightly workflow takes its job matrix from that session list and the bisect builds the same
backend, so the matrix file is the one place a torch version is added. :meth:`Matrix.cell` parses
a cell's name back, and :func:`unknown_session_error` turns a nox command line that asks for a
cell not generated into one line naming the fix.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conformance.ci.axes import AXES, axis
from conformance.ci.matrix_spec import Backend, CollectivesSpec, CompileSpec, MatrixError, Release

__all__ = [
    "SESSION_PREFIX",
    "Cell",
    "Exclusion",
    "Matrix",
    "requested_sessions",
    "unknown_session_error",
]

SESSION_PREFIX = "conformance-"
CROSSED = tuple(a for a in AXES if a.crossed)
EXTRA = tuple(a for a in AXES if not a.crossed)


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: a torch release and one value on each axis."""

    release: Release
    #: axis name -> value; an axis not given has its plain value (filled in on creation)
    values: Mapping[str, str] = field(default_factory=dict, hash=False)
    backend: Backend | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.values) - {a.name for a in AXES})
        if unknown:
            raise ValueError(f"no matrix axis {unknown[0]!r}")
        full = {a.name: self.values.get(a.name, a.plain(self.backend)) for a in AXES}
        object.__setattr__(self, "values", full)

    @property
    def allocator(self) -> str:
        """The allocator mode."""
        return self.values["allocator"]

    @property
    def sanitizer(self) -> str:
        """The sanitizer build (``none``: the plain build)."""
        return self.values["sanitizer"]

    @property
    def modes(self) -> str:
        """The suite's --modes in a ``-compile`` cell; "" in the others."""
        return self.values["compile"]

    @property
    def key(self) -> str:
        """The session name without its prefix: ``2.8``, ``2.8-guard``, ``2.13-aligned-asan``,
        ``2.13-compile``: the minor, then the part of each axis not at its plain value."""
        parts = [a.part(v) for a in AXES if (v := self.values[a.name]) != a.plain(self.backend)]
        return "-".join([self.release.minor, *parts])

    @property
    def session(self) -> str:
        """The nox session name, e.g. ``conformance-2.8-guard`` (``conformance-xla-2.9`` for a
        matrix whose backend has a label)."""
        label = self.backend.label if self.backend is not None else None
        return SESSION_PREFIX + (f"{label}-" if label else "") + self.key

    def tags(self) -> list[str]:
        """The nox tags of the cell: ``torch-<minor>`` and one per axis (none for an axis off)."""
        tags = [f"torch-{self.release.minor}"]
        return tags + [t for a in AXES if (t := a.tag(self.values[a.name])) is not None]

    @property
    def asan(self) -> bool:
        """Whether this cell's sanitizer build preloads the ASan runtime."""
        return "asan" in self.preload

    @property
    def preload(self) -> tuple[str, ...]:
        """Runtime libraries preloaded when the suite runs (``asan``, ``malloc-check``)."""
        if self.backend is None:
            return ()
        backend = self.backend
        return tuple(lib for a in AXES for lib in a.preload(backend, self.values[a.name]))

    def describe(self) -> str:
        """A one-line description (used as the nox session docstring)."""
        module = self.backend.module if self.backend else "the backend"
        text = f"Conformance suite on torch {self.release.version}, {module}"
        return text + "".join(a.describe(self.values[a.name]) for a in AXES) + "."

    @property
    def targets(self) -> tuple[str, ...]:
        """What the cell's suite run collects: ``conformance``, or one family (an axis whose
        cells run one family alone, as the world-size axis runs conformance/collectives)."""
        for a in AXES:
            value = self.values[a.name]
            if value != a.plain(self.backend) and a.targets:
                return a.targets
        return ("conformance",)

    def build_env(self) -> dict[str, str]:
        """Environment variables for building the backend in this cell."""
        if self.backend is None:
            return {}
        env = dict(self.backend.build.env)
        for a in AXES:
            env.update(a.build_env(self.backend, self.values[a.name]))
        return env

    def run_env(self) -> dict[str, str]:
        """Environment variables for running the suite in this cell (preloads not included)."""
        if self.backend is None:
            return {}
        env = dict(self.backend.env)
        for a in AXES:
            env.update(a.run_env(self.backend, self.values[a.name]))
        return env


@dataclass(frozen=True)
class Exclusion:
    """Cells matching every given key are not generated; a key not given matches anything."""

    reason: str
    torch: SpecifierSet | frozenset[str] | None = None
    #: crossed axis name -> the values excluded
    values: Mapping[str, frozenset[str]] = field(default_factory=dict, hash=False)

    def matches(self, minor: str, values: Mapping[str, str]) -> bool:
        """Whether this exclusion removes the cell of torch ``minor`` with these axis values."""
        if isinstance(self.torch, SpecifierSet):
            if Version(minor) not in self.torch:
                return False
        elif self.torch is not None and minor not in self.torch:
            return False
        return all(values[name] in excluded for name, excluded in self.values.items())


@dataclass(frozen=True)
class Matrix:
    """The validated matrix; releases are ordered oldest first."""

    releases: tuple[Release, ...]
    default_minor: str
    python: str | None
    backend: Backend
    exclusions: tuple[Exclusion, ...] = ()
    shards: int = 1  # [nightly].shards: jobs per cell in the nightly, merged by its report
    compiled: CompileSpec | None = None  # [compile]: the compiled axis, if the file has one
    collectives: CollectivesSpec | None = None  # [collectives]: the world-size axis, if any
    source: str = field(default="matrices/matrix.toml", compare=False)
    path: Path | None = field(default=None, compare=False)

    @property
    def allocators(self) -> tuple[str, ...]:
        """The backend's allocator modes."""
        return axis("allocator").values(self)

    @property
    def default_allocator(self) -> str:
        """The allocator of the plain cells (no suffix in session names)."""
        return axis("allocator").plain(self.backend)

    @property
    def sanitizers(self) -> tuple[str, ...]:
        """``none`` and the backend's sanitizer builds."""
        return axis("sanitizer").values(self)

    @property
    def default_sanitizer(self) -> str:
        """The sanitizer of the plain cells: ``none``."""
        return axis("sanitizer").plain(self.backend)

    @property
    def plain_values(self) -> dict[str, str]:
        """Every axis at its plain value: the plain cell of a release."""
        return {a.name: a.plain(self.backend) for a in AXES}

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

    def exclusion(self, minor: str, values: Mapping[str, str]) -> Exclusion | None:
        """The first exclusion that removes the cell (torch ``minor``, axis ``values``)."""
        for exc in self.exclusions:
            if exc.matches(minor, values):
                return exc
        return None

    def _cell(self, release: Release, values: Mapping[str, str]) -> Cell:
        return Cell(release, values, backend=self.backend)

    def cells(self) -> list[Cell]:
        """Every generated cell: releases oldest first; in a release the crossed axes' cells (the
        last crossed axis varying slowest: sanitizers, then allocators), then the extra ones."""
        out = []
        slowest_first = CROSSED[::-1]
        for rel in self.releases:
            for combo in itertools.product(*(a.values(self) for a in slowest_first)):
                values = {a.name: v for a, v in zip(slowest_first, combo, strict=True)}
                if self.exclusion(rel.minor, values) is None:
                    out.append(self._cell(rel, values))
            for extra in EXTRA:
                if not extra.covers(self, rel.minor):
                    continue
                for value in extra.values(self):
                    if value != extra.plain(self.backend):
                        out.append(self._cell(rel, {extra.name: value}))
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
        for extra in EXTRA:  # <minor>-<part>: the extra cell of that value
            for value in extra.values(self):
                if value == extra.plain(self.backend) or rest != [extra.part(value)]:
                    continue
                if not extra.covers(self, release.minor):
                    raise MatrixError(
                        f"cell '{name}': the {extra.declared_in} axis of {self.source} does not "
                        f"cover torch {release.minor}"
                    )
                return self._cell(release, {extra.name: value})
        values = {a.name: a.plain(self.backend) for a in CROSSED}
        for part in rest:  # each crossed axis named at most once, in any order
            for a in CROSSED:
                value = next((v for v in a.values(self) if a.part(v) == part), None)
                if value is not None and values[a.name] == a.plain(self.backend):
                    values[a.name] = value
                    break
            else:
                raise self._unknown_part(name, part)
        exc = self.exclusion(release.minor, values)
        if exc is not None:
            raise MatrixError(f"cell '{name}' is excluded by {self.source}: {exc.reason}")
        return self._cell(release, values)

    def _unknown_part(self, name: str, part: str) -> MatrixError:
        """The error of a name part that is no crossed axis' value, with example cell names."""
        minor = self.default_minor
        examples = [minor, *(f"{minor}-{a.part(v)}" for a in CROSSED for v in a.values(self)[1:2])]
        kinds = " nor ".join(f"{a.noun} ({', '.join(a.values(self))})" for a in CROSSED)
        return MatrixError(
            f"unknown cell '{name}': '{part}' is neither {kinds}; cells look like "
            f"{', '.join(examples)}"
        )


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
