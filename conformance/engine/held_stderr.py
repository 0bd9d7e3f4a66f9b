"""Torch's warnings kept out of the terminal: the suite's own CPU work's, held and tallied here;
a case's, recorded while `CASE_WARNINGS.active` (harness/case_warnings.py).

Sample capture runs torch's CPU kernels on inputs nobody chose, in forked children, and c10's
default handler prints what they warn (`[W... Resize.cpp:30] Warning: An output with one or
more elements was resized ...`) straight to fd 2: the children write where the asker's fd 2
goes (processes/zygote.py passes it). `HELD.held()` points fd 2 at a file while such work runs:
warning lines are tallied (the run's summary line and run.json `capture_warnings`, harness/
case_warnings.py), every other line is written back to stderr when it ends. Nested holds are
one hold. A hard crash while held leaves the file (`conformance-held-stderr-*` in the temp
folder) in place.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = (
    "CASE_WARNINGS",
    "CPP_WARNING",
    "HELD",
    "CaseRecording",
    "HeldStderr",
    "cpp_warnings",
    "quiet",
)

#: c10's default handler: `[W1129 21:55:38.906107180 Resize.cpp:30] Warning: <text> (function f)`
CPP_WARNING = re.compile(r"^\[W\S* \S+ [^\]]+\] Warning: (?P<text>.*?)(?: \(function \S+\))?$")


#: the end c10's handler puts after a warning's text, on its last line
_FUNCTION_END = re.compile(r" \(function \S+\)$")
#: lines one multi-line warning may span (torch's deprecation notes take about 8)
_MOST_LINES = 40


def _warning_end(lines: list[str], first: int) -> int:
    """The index of the last line of the warning whose header is lines[first]: a warning whose
    text has newlines (torch.cholesky's deprecation note) ends at the line carrying
    ` (function f)`. Where none follows within _MOST_LINES, or another warning starts first, the
    header is a warning of one line and what follows is not its text."""
    if _FUNCTION_END.search(lines[first].rstrip()):
        return first
    for i in range(first + 1, min(len(lines), first + _MOST_LINES)):
        if CPP_WARNING.match(lines[i].strip()):
            break
        if _FUNCTION_END.search(lines[i].rstrip()):
            return i
    return first


def split_warnings(text: str) -> tuple[Counter, list[str]]:
    """Stderr lines split: the C++ warnings (("c10", text) -> count; a text of several lines
    joined by spaces) and every other line."""
    found: Counter = Counter()
    rest = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = CPP_WARNING.match(lines[i].strip())
        if not m:
            rest.append(lines[i])
            i += 1
            continue
        end = _warning_end(lines, i)
        body = [m.group("text"), *(ln.strip() for ln in lines[i + 1 : end + 1])]
        found[("c10", _FUNCTION_END.sub("", " ".join(body)).strip())] += 1
        i = end + 1
    return found, rest


def cpp_warnings(text: str) -> Counter:
    """The C++ warnings among stderr lines: ("c10", text) -> count."""
    return split_warnings(text)[0]


class HeldStderr:
    """fd 2 held in a file while the suite's own CPU work runs (see the module docstring)."""

    def __init__(self) -> None:
        self.tally: Counter = Counter()
        self.depth = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        if self.depth:
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
            return
        sys.stderr.flush()
        fd, path = tempfile.mkstemp(prefix=f"conformance-held-stderr-{os.getpid()}-")
        saved = os.dup(2)
        os.dup2(fd, 2)
        self.depth = 1
        try:
            yield
        finally:
            self.depth = 0
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            os.lseek(fd, 0, os.SEEK_SET)
            with os.fdopen(fd, "rb") as kept:
                text = kept.read().decode(errors="replace")
            os.unlink(path)
            found, rest = split_warnings(text)
            self.tally.update(found)
            if rest:
                sys.stderr.write("\n".join(rest) + "\n")
                sys.stderr.flush()


HELD = HeldStderr()


class CaseRecording:
    """Whether this process is recording a case's warnings now (harness/case_warnings.py sets
    it around a case's call phase): the device's calls then warn into the case's record;
    elsewhere they stay quiet, as CPU's reference calls always do (engine/checks.py)."""

    def __init__(self) -> None:
        self.active = False


CASE_WARNINGS = CaseRecording()

#: the one filter a quiet block runs under: every warning ignored
_IGNORE_ALL = ("ignore", None, Warning, None, 0)
#: what catch_warnings calls after changing the filters (CPython 3.10 to 3.13); None where this
#: Python's warnings module has no such hook
_FILTERS_MUTATED = getattr(warnings, "_filters_mutated", None)


class quiet:  # noqa: N801 - used as a context manager, like warnings.catch_warnings
    """Python's warnings (and torch's C++ warnings, which reach Python's) ignored inside:
    `catch_warnings()` with `simplefilter("ignore")`, by swapping in a filter list of one
    ignore-everything entry and putting the caller's list back after, as catch_warnings does
    (a tenth of its cost: CPU's reference runs so on every sample, engine/checks.py). Where
    this Python has no `_filters_mutated`, the block runs under catch_warnings itself."""

    __slots__ = ("_fallback", "_saved")

    def __enter__(self) -> None:
        if _FILTERS_MUTATED is None:
            self._fallback = warnings.catch_warnings()
            self._fallback.__enter__()
            warnings.simplefilter("ignore")
            return
        self._fallback = None
        self._saved = warnings.filters
        warnings.filters = [_IGNORE_ALL]
        _FILTERS_MUTATED()

    def __exit__(self, *exc: object) -> None:
        if self._fallback is not None:
            self._fallback.__exit__(*exc)
            return
        warnings.filters = self._saved
        _FILTERS_MUTATED()
