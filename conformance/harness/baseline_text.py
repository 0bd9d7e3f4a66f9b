"""The text of a baseline manifest (harness/baseline.py computes what it holds): one TOML
`[[entry]]` per group of cases, and the file's header."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from typing import Any, Protocol

from conformance.findings import portable
from conformance.harness.expectations import Entry


class EntryGroup(Protocol):
    """What an entry is written from (baseline.py `Group`)."""

    status: str
    category: str
    reason: str
    comment: str
    carried: Entry | None
    checks: set[str]
    failures: set[str]


def toml(value: Any) -> str:
    """A TOML value: JSON's string escapes are TOML's basic-string escapes."""
    if isinstance(value, list | tuple):
        if len(value) == 1:
            return toml(value[0])
        return "[\n" + "".join(f"  {toml(v)},\n" for v in value) + "]"
    return json.dumps(value)


def entry_text(g: EntryGroup, patterns: list[str], allocator: str = "") -> str:
    """One `[[entry]]`: the group's status, pinned checks and failures (a carried entry's as
    written), category, reason (no machine path), link and allocator."""
    lines = [f"# {line}" for line in g.comment.splitlines()] if g.comment else []
    lines.append("[[entry]]")
    lines.append(f"pattern = {toml(patterns)}")
    lines.append(f"status = {toml(g.status)}")
    checks = sorted(g.checks)
    if g.carried is not None and g.carried.checks:
        checks = list(g.carried.checks)
    if g.status == "xfail" and checks:
        lines.append(f"check = {toml(checks)}")
    failures = sorted(g.failures)
    if g.carried is not None and g.carried.failures:
        failures = list(g.carried.failures)
    if g.status == "xfail" and failures:
        lines.append(f"failure = {toml(failures)}")
    lines.append(f"category = {toml(g.category)}")
    lines.append(f"reason = {toml(portable(g.reason))}")
    if g.carried is not None and g.carried.link:
        lines.append(f"link = {toml(g.carried.link)}")
    allocator = allocator or (g.carried.allocator if g.carried else "")
    if allocator:
        lines.append(f"allocator = {toml(allocator)}")
    return "\n".join(lines) + "\n"


def manifest_header(runs: Sequence[tuple[str, str]], source: str, hints: list[str]) -> str:
    """The comment atop a written manifest: where it came from ((torch minor, allocator) per
    context), how to edit it, and `hints` (dtypes to declare in one line)."""
    said = ", ".join(f"torch {minor} ({allocator or '?'})" for minor, allocator in runs)
    lines = [
        f"# Expected failures written by the conformance baseline on {date.today()} from "
        f"{source or 'a run'}: {said or 'no cases'}.",
        "# One entry per root cause (finding) or group of unsupported cases; each reason is the",
        '# finding\'s title: replace it with what you know (link = "..." to your tracker).',
        '# Strict: a fixed bug fails the run with "remove this entry"; an unsupported kernel',
        "# that appears fails it too. Format: conformance/harness/expectations.py.",
        *hints,
    ]
    return "\n".join(lines) + "\n"
