"""Which pytest nodes are the suite's, from an item or from a node id alone.

Node ids depend on how pytest was started (`pytest conformance` from the checkout gives
`conformance/test_conformance.py::...`; `python -m pytest --pyargs conformance` from another
folder, or a `--results` path elsewhere, moves rootdir and gives `test_conformance.py::...` or
`../...`), so a node id is resolved against every folder it can be relative to and judged by the
file it names, never by its spelling. No state, no imports of the rest of the harness.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

from conformance.record import TEST_NAME, CaseId

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE_PARAM = "conformance_case"  # the fixture the generated test is parametrised over
RECORD_PROPERTY = "conformance"  # name of the record in a report's user_properties
#: per item: what its test judged (a family's own verdict: the op cases' record, a collectives
#: or module verdict, the contract's runtime), read by its family's record factory
VERDICT_KEY = pytest.StashKey[Any]()


def leave_verdict(item: pytest.Item, verdict: Any) -> None:
    """A case's test leaves what it judged on its item: the one way a verdict reaches its
    record (harness/families: each family's `report_record` reads it with `left_verdict`)."""
    item.stash[VERDICT_KEY] = verdict


def left_verdict(item: pytest.Item) -> Any:
    """What the item's test left with `leave_verdict` (None: it left nothing, or it broke
    first)."""
    return item.stash.get(VERDICT_KEY, None)


def case_of(item: pytest.Item) -> CaseId | None:
    """The case a generated test item runs (None for any other test)."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get(CASE_PARAM) if callspec is not None else None
    return case if isinstance(case, CaseId) else None


def record_id(nodeid: str) -> str:
    """The `id` of the record of a node: its name within the file."""
    return nodeid.split("::", 1)[-1]


def node_bases(config: pytest.Config, family_folders: Iterable[str]) -> list[str]:
    """The folders a node id of this session can be relative to (`family_folders`: the
    families' test folders, harness/families)."""
    bases = [str(config.rootpath), str(config.invocation_params.dir)]
    return [*bases, PACKAGE_DIR, os.path.dirname(PACKAGE_DIR), *family_folders]


class NodeJudge:
    """Whether a node id names a generated case or a case of a family, from the id alone (an
    xdist controller has no items): the file it names, resolved against `bases`, is the
    suite's. Each file is resolved once (a controller judges every report of the run: tens of
    thousands of node ids over a handful of files)."""

    def __init__(self, bases: Iterable[str], family_folders: Iterable[str]) -> None:
        self.bases = list(bases)
        self.package = os.path.realpath(PACKAGE_DIR) + os.sep
        self.families = tuple(os.path.realpath(d) + os.sep for d in family_folders)
        self.files: dict[str, str | None] = {}  # file part of a node id -> "cases", "family"

    def __call__(self, nodeid: str) -> bool:
        file, _, name = nodeid.partition("::")
        if not name:
            return False
        kind = self.files[file] if file in self.files else self._kind(file)
        return kind == "family" or (kind == "cases" and name.startswith(TEST_NAME + "["))

    def _kind(self, file: str) -> str | None:
        kind = None
        for base in self.bases:
            path = os.path.realpath(os.path.join(base, file))
            if path.startswith(self.package) and os.path.isfile(path):
                kind = "family" if path.startswith(self.families) else "cases"
                break
        self.files[file] = kind
        return kind


def targets_conformance(config: pytest.Config) -> bool:
    """Whether the command line names the conformance package (or something inside it), as a
    path or with --pyargs."""
    for arg in config.args:
        text = str(arg).split("::")[0]
        if config.option.pyargs and (text == "conformance" or text.startswith("conformance.")):
            return True
        path = os.path.abspath(text)
        if path == PACKAGE_DIR or path.startswith(PACKAGE_DIR + os.sep):
            return True
    return False


def targets_only(config: pytest.Config, folders: Iterable[str]) -> bool:
    """Whether every path of the command line (or --pyargs name) is inside one of `folders`."""
    folders = tuple(folders)
    if not config.args:
        return False
    for arg in config.args:
        text = str(arg).split("::")[0]
        if config.option.pyargs:
            dotted = [os.path.relpath(f, os.path.dirname(PACKAGE_DIR)).replace(os.sep, ".")
                      for f in folders]  # fmt: skip
            if not any(text == d or text.startswith(d + ".") for d in dotted):
                return False
            continue
        path = os.path.abspath(text)
        if not any(path == f or path.startswith(f + os.sep) for f in folders):
            return False
    return True
