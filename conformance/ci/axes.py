"""The axes of the matrix, declared once: :data:`AXES`, one :class:`Axis` entry each.

A cell is a torch release (every cell has one: it comes first in the session name and is what the
venv installs) plus one value on each axis. An axis' entry says everything the axis changes: the
values a matrix file gives it, the value of the plain cells, the part a value adds to the session
name and to its nox tags, its clause in the session's description, the environment it sets for the
backend's build and for the suite run (the suite reads ``CONFORMANCE_MODES`` as its ``--modes``),
the runtime libraries it preloads, and how its cells are generated: *crossed* with the other
crossed axes (and named by ``[[exclude]]`` entries), or *extra*, one more cell per release and
value with every other axis plain. Cell names, the session list, the nightly's job list, the
bisect's probe cells and ``[[exclude]]`` keys all come from this table; a new axis is one entry
here (plus, when its values come from a new table of the matrix file, reading that table in
:mod:`conformance.ci.matrix_file`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from conformance.ci.matrix_spec import (
    NO_SANITIZER,
    AllocatorSpec,
    Backend,
    CollectivesSpec,
    CompileSpec,
)


class Matrix(Protocol):
    """What an axis reads of a matrix (conformance.ci.matrix.Matrix): its declarations."""

    backend: Backend
    compiled: CompileSpec | None
    collectives: CollectivesSpec | None
    default_minor: str


__all__ = ["AXES", "Axis", "axis"]


def _nothing(backend: Backend, value: str) -> Mapping[str, str]:
    return {}


def _no_preload(backend: Backend, value: str) -> tuple[str, ...]:
    return ()


def _everywhere(matrix: Matrix, minor: str) -> bool:
    return True


@dataclass(frozen=True)
class Axis:
    """One axis of the matrix: how its values are found, name cells and change a cell's run."""

    #: the key of :attr:`Cell.values`, of an ``[[exclude]]`` entry (crossed axes) and the noun
    #: of error messages
    name: str
    #: where a matrix file declares the values (error messages)
    declared_in: str
    #: True: every value with every value of the other crossed axes, minus the [[exclude]]d cells;
    #: False: one extra cell per release (that ``covers`` allows) and non-plain value, others plain
    crossed: bool
    #: the axis' values in a matrix, in the order cells are generated (the plain one included)
    values: Callable[[Matrix], tuple[str, ...]]
    #: the value of the plain cells, which adds nothing to their session name
    plain: Callable[[Backend | None], str]
    #: the clause a value adds to the session's description ("" adds none)
    describe: Callable[[str], str]
    #: the session-name part (and nox tag) of a value; None: the value itself
    suffix: str | None = None
    #: environment variables of the backend's build
    build_env: Callable[[Backend, str], Mapping[str, str]] = _nothing
    #: environment variables of the suite run
    run_env: Callable[[Backend, str], Mapping[str, str]] = _nothing
    #: runtime libraries preloaded into the suite run (conformance.ci.launch: asan, malloc-check)
    preload: Callable[[Backend, str], tuple[str, ...]] = _no_preload
    #: whether a release gets the axis' extra cells (extra axes only)
    covers: Callable[[Matrix, str], bool] = _everywhere
    #: what the suite run of a cell off the plain value collects (empty: the whole suite)
    targets: tuple[str, ...] = ()

    def part(self, value: str) -> str:
        """The session-name part of ``value`` (when it is not the plain one)."""
        return self.suffix or value

    def tag(self, value: str) -> str | None:
        """The nox tag of ``value``: its name part; none for the empty value (the axis off)."""
        return self.part(value) if value else None

    @property
    def noun(self) -> str:
        """``an allocator``, ``a sanitizer``: the axis in error messages."""
        return ("an " if self.name[0] in "aeiou" else "a ") + self.name


def _allocator_env(backend: Backend, mode: str) -> Mapping[str, str]:
    return {backend.allocator.env: mode} if backend.allocator.env else {}


def _world_env(backend: Backend, value: str) -> Mapping[str, str]:
    """A ``world<N>`` cell: the collectives family's default selection at world size N."""
    if not value:
        return {}
    return {
        "CONFORMANCE_WORLD_SIZES": value.removeprefix("world"),
        "CONFORMANCE_COLLECTIVES_SET": "default",
    }


def _world_values(matrix: Matrix) -> tuple[str, ...]:
    sizes = matrix.collectives.world_sizes if matrix.collectives else ()
    return ("", *(f"world{n}" for n in sizes))


AXES: tuple[Axis, ...] = (
    Axis(
        # [backend.allocator]: the backend's allocator modes, one selected by its variable
        name="allocator",
        declared_in="[backend.allocator]",
        crossed=True,
        values=lambda matrix: matrix.backend.allocator.modes,
        plain=lambda backend: (backend.allocator if backend else AllocatorSpec()).default,
        describe=lambda mode: f", {mode} allocator" if mode != "default" else "",
        run_env=_allocator_env,
    ),
    Axis(
        # [backend.sanitizers.<name>]: sanitizer builds (build and run environment, preloads)
        name="sanitizer",
        declared_in="[backend.sanitizers]",
        crossed=True,
        values=lambda matrix: (NO_SANITIZER, *(s.name for s in matrix.backend.sanitizers)),
        plain=lambda backend: NO_SANITIZER,
        describe=lambda name: f", built with {name.upper()}" if name != NO_SANITIZER else "",
        build_env=lambda backend, name: backend.sanitizer(name).build_env,
        run_env=lambda backend, name: backend.sanitizer(name).run_env,
        preload=lambda backend, name: backend.sanitizer(name).preload,
    ),
    Axis(
        # [compile]: the compiled paths, the suite's --modes in a <minor>-compile cell
        name="compile",
        declared_in="[compile]",
        crossed=False,
        values=lambda matrix: ("", matrix.compiled.modes) if matrix.compiled else ("",),
        plain=lambda backend: "",
        describe=lambda modes: f", compiled paths (--modes {modes})" if modes else "",
        suffix="compile",
        run_env=lambda backend, modes: {"CONFORMANCE_MODES": modes} if modes else {},
        covers=lambda matrix, minor: matrix.compiled is not None and matrix.compiled.covers(minor),
    ),
    Axis(
        # [collectives]: world sizes; a <minor>-world<N> cell runs conformance/collectives alone
        name="world size",
        declared_in="[collectives]",
        crossed=False,
        values=_world_values,
        plain=lambda backend: "",
        describe=lambda v: f", collectives at world size {v.removeprefix('world')}" if v else "",
        run_env=_world_env,
        # the default torch only: a world of ranks is minutes of the nightly budget per cell
        covers=lambda matrix, minor: minor == matrix.default_minor,
        targets=("conformance/collectives",),
    ),
)


def axis(name: str) -> Axis:
    """The entry of :data:`AXES` named ``name``."""
    for entry in AXES:
        if entry.name == name:
            return entry
    raise KeyError(f"no matrix axis {name!r} (axes: {', '.join(a.name for a in AXES)})")
