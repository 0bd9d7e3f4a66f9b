"""What a matrix file declares: torch releases, the backend under test, the [compile] settings.

A matrix file (``matrices/matrix.toml`` for echo_npu, ``conformance-matrix.toml`` in a backend's own
repository) holds the torch releases, a :class:`Backend` description (module, how to build it into
a session's venv against that session's torch, allocator modes and how one is selected, sanitizer
builds, extra requirements) and the optional [compile] settings. :mod:`conformance.ci.matrix_file`
reads and validates it into these values; :mod:`conformance.ci.axes` turns them into the axes of
the cells.

Every problem with the file or with a requested cell raises :class:`MatrixError`, whose message is a
single line naming the valid choices or the fix, so that command-line front ends can print it
without a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conformance.errors import ConformanceUsageError

__all__ = [
    "DEFAULT_COMPILE_MODES",
    "NO_SANITIZER",
    "PRELOADS",
    "AllocatorSpec",
    "Backend",
    "BuildSpec",
    "CompileSpec",
    "MatrixError",
    "Release",
    "Sanitizer",
]

NO_SANITIZER = "none"
DEFAULT_COMPILE_MODES = "grad,inference,sync,compile"
#: Preloads a sanitizer build may ask for at run time (see conformance/ci/launch.py).
PRELOADS = ("asan", "malloc-check")


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
class CompileSpec:
    """[compile]: cells ``<minor>-compile`` (default allocator, plain build) that run the suite
    with ``modes`` (the -compile cases, the AOTInductor scenarios), for the minors in ``torch``."""

    modes: str = DEFAULT_COMPILE_MODES
    torch: SpecifierSet | None = None

    def covers(self, minor: str) -> bool:
        """Whether torch ``minor`` gets a ``-compile`` cell."""
        return self.torch is None or Version(minor) in self.torch


@dataclass(frozen=True)
class CollectivesSpec:
    """[collectives]: cells ``<minor>-world<N>`` (default allocator, plain build) that run the
    collectives family alone (``conformance/collectives``, its default selection) at world size
    N, for each N of ``world_sizes`` (docs/COLLECTIVES.md)."""

    world_sizes: tuple[int, ...] = (2, 4)
