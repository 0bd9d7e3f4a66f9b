"""The processes are drawn from their table (processes/kinds.py): docs/ARCHITECTURE.md's tree
and the run header's isolation line change with a row, so the words cannot drift from the code
(issue 82: the header said a forked runner's zygote was "a fresh interpreter with one thread"
where a plain pytest run forks it from itself)."""

from __future__ import annotations

import dataclasses

from conformance.engine.device_probe import Probe
from conformance.harness.plan import Plan
from conformance.harness.roles import Role
from conformance.processes import kinds, picture


def test_the_doc_section_is_drawn_from_the_table():
    text = picture.DOC.read_text()
    section = text[
        text.index(picture.DOC_BEGIN) : text.index(picture.DOC_END) + len(picture.DOC_END)
    ]
    assert section == picture.markdown(), "run: python -m conformance.processes.picture"


def test_a_changed_row_changes_the_doc_and_the_header(monkeypatch):
    before_doc = picture.markdown()
    before_header = Plan("fork", Probe(True, "test")).describe(60)
    assert "forked by the runner zygote" in before_header
    row = dataclasses.replace(kinds.kind("runner-zygote"), why="is planted by the test")
    table = tuple(row if k.name == row.name else k for k in kinds.KINDS)
    monkeypatch.setattr(kinds, "KINDS", table)
    monkeypatch.setattr(kinds, "BY_NAME", {k.name: k for k in table})
    assert "is planted by the test" in picture.markdown() != before_doc
    header = Plan("fork", Probe(True, "test")).describe(60)
    assert "is planted by the test" in header != before_header


def test_the_header_s_fork_rule_names_the_rows_that_fork(monkeypatch):
    """The device probe's header line says who forks from the table: a row that starts forking
    while clean is named there."""
    assert "task-zygote" in picture.fork_rule() and "runner-zygote" in picture.fork_rule()
    assert "foundation-probe" not in picture.fork_rule()  # it never forks
    row = dataclasses.replace(kinds.kind("foundation-probe"), forks="while clean")
    table = tuple(row if k.name == row.name else k for k in kinds.KINDS)
    monkeypatch.setattr(kinds, "KINDS", table)
    assert "foundation-probe" in picture.fork_rule()


def test_every_role_is_a_row_and_reads_what_it_writes_from_it():
    from conformance.harness.session import RUNNING_ONLY

    assert {r.kind.name for r in Role} <= set(kinds.BY_NAME)
    assert set(RUNNING_ONLY) == {Role.FORKED_CHILD, Role.SPAWNED_RUNNER, Role.ZYGOTE}
    assert all(r.kind.runs_cases for r in (Role.FORKED_CHILD, Role.SPAWNED_RUNNER))
