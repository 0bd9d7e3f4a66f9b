"""The families of cases, as plug-ins (families/base.py): op cases, scenarios, the runtime
contract and collectives. Each module of this package that defines `FAMILY` is one; the
registry finds them, so a new family is one module here (and its tests)."""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from conformance.harness.families.base import Family
from conformance.harness.nodes import PACKAGE_DIR, NodeJudge, node_bases, targets_only
from conformance.record import CaseRecord

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class Families:
    """The registered families, in run order (immutable)."""

    def __init__(self, members: list[Family]) -> None:
        self.members: tuple[Family, ...] = tuple(sorted(members, key=lambda f: f.rank))

    def of_item(self, item: pytest.Item) -> Family | None:
        """The family of a collected item (None: not a conformance case)."""
        return next((f for f in self.members if f.owns_item(item)), None)

    def of_nodeid(self, nodeid: str) -> Family | None:
        """The family of a node id alone (an xdist controller, the end-of-run accounting)."""
        return next((f for f in self.members if f.owns_nodeid(nodeid)), None)

    def of_key(self, key: str) -> Family | None:
        """The family a manifest pattern or key names (`contract:<item>`), None for an op
        case's id or pattern."""
        prefix, colon, _ = key.partition(":")
        return next((f for f in self.members if colon and f.manifest_prefix == prefix), None)

    def record_key(self, record: CaseRecord) -> str | None:
        """The manifest key of a family's record (`scenario:<name>`), None for an op case."""
        family = self.named(record.family)
        return family.record_key(record) if family is not None else None

    def option_classes(self) -> dict[str, type]:
        """Each family's own options dataclass, by family name (harness/options.py reads them
        with the suite's)."""
        return {f.name: f.options for f in self.members if f.options is not None}

    def named(self, name: str) -> Family | None:
        """The family of that name (a record's `family`)."""
        return next((f for f in self.members if f.name == name), None)

    def header_lines(self, suite: Suite) -> list[str]:
        """Every family's lines of the run header, in the registry's order; none where
        --ops/--fallback-ops leave the families out (their plans are not made)."""
        if suite.options.names_overloads:
            return []
        return [line for f in self.members for line in f.header_lines(suite)]

    def key_header_lines(self, suite: Suite) -> list[str]:
        """The families' lines shown under -q too (harness/header.py `key_header_lines`)."""
        if suite.options.names_overloads:
            return []
        return [line for f in self.members for line in f.key_header_lines(suite)]

    def end_notes(self, records: list[CaseRecord]) -> list[str]:
        """Every family's lines at the end of the run's summary, in the registry's order."""
        return [line for f in self.members for line in f.end_notes(records)]

    def folders(self, *names: str) -> list[str]:
        """The test folders (absolute paths) of the families (those named, else all)."""
        chosen = [f for f in self.members if not names or f.name in names]
        return [os.path.join(PACKAGE_DIR, f.folder) for f in chosen if f.folder is not None]

    def nodeid_judge(self, config: pytest.Config) -> Callable[[str], bool]:
        """Whether a node id names a case of any family (from the id alone, however pytest
        spelled it: harness/nodes.py), for this session."""
        folders = self.folders()
        bases = node_bases(config, folders)
        return NodeJudge(bases, folders)

    def targets_only(self, config: pytest.Config, *names: str) -> bool:
        """Whether the command line names nothing but the folders of these families (of every
        family but the op cases when none is named): such a run has no op case."""
        return targets_only(config, self.folders(*names))

    def named_alone(self, config: pytest.Config) -> str | None:
        """The family whose folder is all the command line names, if one is."""
        alone = [f.name for f in self.members if f.folder and self.targets_only(config, f.name)]
        return alone[0] if len(alone) == 1 else None


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
