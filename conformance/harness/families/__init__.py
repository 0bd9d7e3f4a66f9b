"""The families of cases, as plug-ins (families/base.py): op cases, scenarios, the runtime
contract and collectives. Each module of this package that defines `FAMILY` is one; the
registry finds them, so a new family is one module here (and its tests)."""

from __future__ import annotations

import functools
import importlib
import pkgutil

import pytest

from conformance.harness.families.base import Family


class Families:
    """The registered families, in run order (immutable)."""

    def __init__(self, members: list[Family]) -> None:
        self.members: tuple[Family, ...] = tuple(sorted(members, key=lambda f: f.rank))
        self.by_name = {f.name: f for f in self.members}

    def of_item(self, item: pytest.Item) -> Family | None:
        """The family of a collected item (None: not a conformance case)."""
        return next((f for f in self.members if f.owns_item(item)), None)

    def of_nodeid(self, nodeid: str) -> Family | None:
        """The family of a node id alone (an xdist controller, the end-of-run accounting)."""
        return next((f for f in self.members if f.owns_nodeid(nodeid)), None)

    def named(self, name: str) -> Family:
        return self.by_name[name]

    def folders(self) -> list[str]:
        """The families' test folders inside the package."""
        return [f.folder for f in self.members if f.folder is not None]


@functools.cache
def registry() -> Families:
    """Every module of this package that defines FAMILY, found once."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if isinstance(family, Family):
            found.append(family)
    return Families(found)
