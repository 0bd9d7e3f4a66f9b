"""What a kind of case ("family") is to the harness: the items and node ids it owns, and one
record factory for every outcome of its cases (passed, failed, crashed, hung, not-run, xfail,
unexpected pass, skipped), so a crash, a hang and a not-run are built the same way for every
family, in a runner's owner, an xdist controller and at the end of a run.

A family is one module of this package that defines `FAMILY` (families/__init__.py finds it);
the harness asks the registry, never a folder name or a test-name prefix.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest
import torch

from conformance.harness.nodes import PACKAGE_DIR, record_id
from conformance.record import CaseRecord, Status

if TYPE_CHECKING:
    from conformance.harness.suite import Suite


class Family:
    """One kind of case. Subclasses set the class attributes and the two record methods."""

    name: str = ""  # the record's `family`, e.g. "scenarios"
    folder: str | None = None  # its tests' folder in the package (None: the generated op cases)
    rank: int = 0  # the registry's order (header lines, end-of-run notes): lower first
    # a manifest pattern names a case of the family as "<manifest_prefix>:<name>", the name
    # being the record's field `manifest_field` (or that key of its `extra`); None: the op
    # cases, named by their case ids
    manifest_prefix: str | None = None
    manifest_field: str = "id"
    # the check a failing case of the family carries (docs/RESULTS.md must describe it: a meta
    # test insists); None: the op cases, whose checks are the engine's
    check: str | None = None
    # its own command-line options: a dataclass of harness/options.py `option` fields, read
    # with the suite's (Options.family(name, options)); None: it has none
    options: type | None = None
    # how the findings read its failing records (record.py `FINDINGS_OF_OLDER_RECORDS` says
    # the keys), written into each record's `extra["findings"]`; empty: as the op cases'
    findings: Mapping[str, Any] = MappingProxyType({})

    def owns_item(self, item: pytest.Item) -> bool:
        """Whether `item` is one of this family's cases."""
        assert self.folder is not None
        return _in_folder(str(item.path), os.path.join(PACKAGE_DIR, self.folder))

    def owns_nodeid(self, nodeid: str) -> bool:
        """Whether the node id names one of this family's cases (an xdist controller has no
        items): its file is in a folder named as the family's, or, where pytest's rootdir was
        that folder (no folder in the id), a file of that name is in it."""
        assert self.folder is not None
        file, _, name = nodeid.partition("::")
        if not name:
            return False
        folder = os.path.basename(os.path.dirname(file))
        if folder:
            return folder == self.folder
        return os.path.isfile(os.path.join(PACKAGE_DIR, self.folder, file))

    def new_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        """The record of the case `nodeid` with `status` (a crash, a hang or a not-run passes
        its check and message): every field that names the case filled in, and its repro."""
        return self._ours(self.build_record(suite, nodeid, status, **values))

    def _ours(self, record: CaseRecord) -> CaseRecord:
        """The record as this family's: its `family`, and how findings read it."""
        record.family = self.name
        if self.findings:
            record.extra["findings"] = dict(self.findings)
        return record

    def case_record(
        self,
        suite: Suite,
        nodeid: str,
        status: Status,
        name: str | None,
        test_file: str | None = None,
        **fields: Any,
    ) -> CaseRecord:
        """A record of the case `nodeid` (every family's identity block is written here), with
        `fields` (op, overload, dtype, ...): the run's torch, backend, allocator and the case's
        repro (of its test file, `test_file` or the family's) filled in. Where the case has a
        manifest name `name`, it is kept in the record's `manifest_field` (of `extra`, unless
        a field of the record already holds it) and a hang's or a crash's message is prefixed
        `[<manifest prefix> <name>]`."""
        record = CaseRecord(
            id=record_id(nodeid),
            status=status,
            torch=str(torch.__version__),
            backend=suite.backend_name,
            allocator=suite.allocator,
            repro=suite.repro_lines.repro(nodeid, test_file or self.test_file(nodeid)),
            **fields,
        )
        if name is None:
            return record
        if self.manifest_field not in CaseRecord.__dataclass_fields__:
            record.extra[self.manifest_field] = name
        if record.message and status in (Status.HUNG, Status.CRASHED):
            record.message = f"[{self.manifest_prefix} {name}] {record.message}"
        return record

    def record_from_report(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        """The record of a case that ran, from its pytest report (expectations applied)."""
        return self._ours(self.report_record(suite, item, report))

    def manifest_key(self, name: str) -> str:
        """What manifest patterns are matched against for the case `name` (`contract:<item>`)."""
        assert self.manifest_prefix is not None
        return f"{self.manifest_prefix}:{name}"

    def record_key(self, record: CaseRecord) -> str | None:
        """The manifest key of one of the family's records (None: it names no case)."""
        if self.manifest_prefix is None:
            return None
        name = getattr(record, self.manifest_field, None) or record.extra.get(self.manifest_field)
        return self.manifest_key(str(name)) if name else None

    def judged_keys(self, pattern: str, keys: list[str]) -> list[str]:
        """The keys of the run's records a manifest pattern of the family is judged against
        when the stale-entry check asks whether it matches any (all of them, by default)."""
        return keys

    def plan(self, suite: Suite) -> Any:
        """What the family judges in this run (`make_plan`), made once per run."""
        if self.name not in suite.family_plans:
            suite.family_plans[self.name] = self.make_plan(suite)
        return suite.family_plans[self.name]

    # ---- what a family module defines -------------------------------------------------------
    def build_record(self, suite: Suite, nodeid: str, status: Status, **values: Any) -> CaseRecord:
        raise NotImplementedError

    def report_record(
        self, suite: Suite, item: pytest.Item, report: pytest.TestReport
    ) -> CaseRecord:
        raise NotImplementedError

    def make_plan(self, suite: Suite) -> Any:
        """What the family judges in this run, from the options and the device profile (the
        collectives' c10d backend and world sizes); None where it has nothing to choose."""
        return None

    def expect(self, suite: Suite, item: pytest.Item) -> None:
        """Apply the manifest's entries naming this case to its item before it runs (xfail,
        skip, crash); the op cases apply theirs when they run (harness/verdicts.py)."""

    def header_lines(self, suite: Suite) -> list[str]:
        """The family's lines of the run header (what it judges in this run)."""
        return []

    def key_header_lines(self, suite: Suite) -> list[str]:
        """Those of its lines shown under -q too (all of them, unless it says otherwise)."""
        return self.header_lines(suite)

    def end_notes(self, records: list[CaseRecord]) -> list[str]:
        """The family's lines at the end of the run's summary (what it could not judge)."""
        return []

    def test_file(self, nodeid: str) -> str:
        """The test file of a node id of this family, as a path inside the package."""
        assert self.folder is not None
        return os.path.join(PACKAGE_DIR, self.folder, os.path.basename(nodeid.partition("::")[0]))


@functools.lru_cache(maxsize=4096)
def _in_folder(path: str, folder: str) -> bool:
    """Whether the file `path` lies in `folder`, links resolved (asked for every item of a run
    by every family: a run's items share a few dozen files)."""
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)


def deselect_empty_parameter_set(
    config: pytest.Config, items: list[pytest.Item], test: str, param: str, kind: type
) -> None:
    """A family's test parametrized over no case at all (`param` holds no `kind`) gets no item
    either, rather than the one skipped `[NOTSET]` item pytest makes of an empty parameter set
    (a family's conftest calls this from pytest_collection_modifyitems)."""
    empty = [
        item
        for item in items
        if getattr(item, "originalname", None) == test
        and not isinstance(getattr(getattr(item, "callspec", None), "params", {}).get(param), kind)
    ]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [item for item in items if item not in empty]
