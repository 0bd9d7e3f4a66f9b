"""What torch or the backend warned during a case goes into its record, not into the terminal.

A case's call phase runs under `captured()`: every Python warning is recorded (torch's C++
`TORCH_WARN` raised under a Python call arrives as one), with the user's `-W` and ini
`filterwarnings` still applied on top (so `-W error::UserWarning` still raises in the case). Where
the process's stderr is a file (a runner's log: harness/runners.py), the C++ warnings c10's own
handler wrote there during the case (a backend thread's, or one raised outside a Python call) are
read back too. The record's `warnings` lists them deduplicated, with counts; the summary counts
the cases that warned. A crash's stderr is untouched (the runner's log keeps it). c10's
`TORCH_WARN_ONCE` warns once per process; during a case it warns every time
(`torch.set_warn_always`), as the "always" filter makes Python's warnings do: a case's record
does not depend on which case of its process warned first.
"""

from __future__ import annotations

import importlib
import os
import re
import stat
import sys
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from conformance.engine.held_stderr import CASE_WARNINGS, HELD, cpp_warnings
from conformance.harness.case_reports import RECORD_PROPERTY, ends_case

__all__ = ("CaseWarnings", "QuietSetup", "captured", "recorded", "summary_line")

RELAY_KEY = "conformance-capture-warnings"  # in an xdist worker's workeroutput

#: distinct warnings kept in one record (the rest are counted in the last entry)
KEPT = 20
_TALLY = pytest.StashKey[Counter]()


def _stderr_file_size() -> int | None:
    """The size of the file fd 2 writes to, or None where fd 2 is no regular file."""
    try:
        info = os.fstat(2)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _add_filter(text: str, escape: bool) -> None:
    """One `action:message:category:module:lineno` filter, as pytest reads `-W` (message and
    module literal: `escape`) and ini `filterwarnings` (regular expressions); pytest's own
    parser is private and moved between releases. One it cannot read is left out (pytest
    itself refused it already)."""
    action, message, category, module, lineno = [*text.split(":", 4), "", "", "", ""][:5]
    try:
        kind: type[Warning] = Warning
        if category.strip():
            where, _, name = category.strip().rpartition(".")
            kind = getattr(importlib.import_module(where or "builtins"), name)
        message, module = message.strip(), module.strip()
        if escape:
            message = re.escape(message)
            module = re.escape(module) + r"\Z" if module else ""
        number = int(lineno) if lineno.strip() else 0
        warnings.filterwarnings(action.strip() or "default", message, kind, module, number)  # type: ignore[arg-type]
    except (ImportError, AttributeError, ValueError, TypeError, AssertionError, re.error):
        return


@contextmanager
def captured(config: pytest.Config) -> Iterator[Counter]:
    """Record what is warned while active into the yielded Counter ((category, text) -> n),
    under the run's ini `filterwarnings` and `-W` options."""
    ini = config.getini("filterwarnings")
    with recorded(ini, config.known_args_namespace.pythonwarnings or []) as tally:
        yield tally


@contextmanager
def recorded(ini: Sequence[str] = (), cli: Sequence[str] = ()) -> Iterator[Counter]:
    """`captured` with its filters given (ini `filterwarnings` lines, `-W` options): what a
    case's call phase runs inside (the bench runs its cases so too: the user's path)."""
    import torch

    tally: Counter = Counter()
    sys.stderr.flush()
    start = _stderr_file_size()
    every_time = torch.is_warn_always_enabled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for text in ini:  # ini first: the command line wins
            _add_filter(text, escape=False)
        for text in cli:
            _add_filter(text, escape=True)
        CASE_WARNINGS.active = True
        torch.set_warn_always(True)  # TORCH_WARN_ONCE: the case's, whoever warned it before
        try:
            yield tally
        finally:
            CASE_WARNINGS.active = False
            torch.set_warn_always(every_time)
            for w in caught:
                tally[(w.category.__name__, str(w.message).strip())] += 1
            if start is not None:
                sys.stderr.flush()
                with open("/proc/self/fd/2", "rb") as log:
                    log.seek(start)
                    tally.update(cpp_warnings(log.read().decode(errors="replace")))


def as_json(tally: Counter) -> list[dict[str, Any]]:
    """The record's `warnings`: most frequent first."""
    items = tally.most_common()
    out = [{"category": c, "message": m[:500], "count": n} for (c, m), n in items[:KEPT]]
    if len(items) > KEPT:
        rest = sum(n for _, n in items[KEPT:])
        out.append({"category": "", "message": f"{len(items) - KEPT} more", "count": rest})
    return out


def summary_line(records: list[Any]) -> str | None:
    """One line for the summary: how many cases warned, and the most frequent warning."""
    warned = [r for r in records if r.extra.get("warnings")]
    if not warned:
        return None
    texts: Counter = Counter()
    for r in warned:
        for w in r.extra["warnings"]:
            texts[w.get("message", "")] += int(w.get("count", 1))
    top, n = texts.most_common(1)[0]
    return (
        f"warnings: {len(warned)} case(s) warned, {len(texts)} distinct warning(s) kept in their "
        f"records (`warnings`), not printed; most often ({n}x): {top[:160]}"
    )


class CaseWarnings:
    """The plugin: a case's call phase captured, its warnings added to the record it reports."""

    def __init__(self, is_case: Any) -> None:
        self.is_case = is_case  # item -> whether it is a conformance case

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        if not self.is_case(item):
            yield
            return
        with captured(item.config) as tally:
            yield
        item.stash[_TALLY] = tally

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        tally = item.stash.get(_TALLY, None)
        report = outcome.get_result()
        if not tally or not ends_case(report):
            return
        for name, data in report.user_properties:
            if name == RECORD_PROPERTY and isinstance(data, dict):
                data["warnings"] = as_json(tally)


class QuietSetup:
    """The suite's start and collection run with fd 2 held (engine/held_stderr.py): what torch
    warns about the suite's own CPU work there is tallied, not printed; one summary line. An
    xdist worker hands its tally to the controller through xdist's own channel
    (`workeroutput`), so the line and run.json speak for every worker, not only the process that
    prints them."""

    def __init__(self) -> None:
        self.relayed: Counter = Counter()  # the workers' tallies

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session):
        with HELD.held():
            yield

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session):
        with HELD.held():
            yield

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)  # an xdist worker's to send
        if output is not None:
            output[RELAY_KEY] = [[c, m, n] for (c, m), n in HELD.tally.items()]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """xdist controller: a worker's tally (sent at its end; none from a worker that died)."""
        for c, m, n in getattr(node, "workeroutput", {}).get(RELAY_KEY, []):
            self.relayed[c, m] += int(n)

    def tally(self) -> Counter:
        return HELD.tally + self.relayed

    def to_json(self) -> list[dict[str, Any]]:
        return as_json(self.tally())

    def summary_line(self) -> str | None:
        tally = self.tally()
        if not tally:
            return None
        (_, top), n = tally.most_common(1)[0]
        return (
            f"sample capture: torch warned {sum(tally.values())} time(s) on CPU "
            f"({len(tally)} distinct; run.json `capture_warnings`), not printed; most "
            f"often ({n}x): {top[:120]}"
        )
