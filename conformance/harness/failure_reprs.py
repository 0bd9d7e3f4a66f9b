"""How a failed conformance case's exception is shown (its report's longrepr, the text under
FAILURES), made without the backend's ops and without parsing source files.

pytest's default (`--tb auto`: long) formats each frame of the traceback with its statement,
which it finds by parsing the frame's whole source file (`ast.parse`, again for every failure),
and with the frame's arguments through `repr()`: device tensors printed by the backend's own
ops, after the case was judged and timed. The cases whose exception is no verdict of ours (a
module case or a scenario where the device raised) fail that way by the hundred on a young
backend: on torch_opencl, 627 of 636 module cases, and formatting their tracebacks (frames in
torch.nn's largest files) was 78 % of the runners' CPU and most of the run's time outside the
cases. So a conformance case's exception is shown as Python prints it (pytest's "native" style),
from the test function down; its crash line (a record's message, the FAILED line) is pytest's,
the same as before. A verdict of the suite (`pytest.fail(..., pytrace=False)`) keeps pytest's
one-line style, and `--tb` (any style but auto), `-l` or `--fulltrace` gives pytest's own
formatting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


def native_wanted(config: pytest.Config) -> bool:
    """Whether failures of conformance cases are shown natively: the user chose no --tb style
    and asked for no frame's locals (-l) or full trace."""
    chosen = config.getoption("fulltrace", False) or config.getoption("showlocals", False)
    return config.getoption("tbstyle", "auto") == "auto" and not chosen


@contextlib.contextmanager
def shown_natively(item: pytest.Item, call: pytest.CallInfo, case: bool) -> Iterator[None]:
    """While pytest makes `item`'s report of `call`: a failed call's exception shown natively
    if `item` is a conformance case (see the module docstring); anything else as pytest shows
    it."""
    excinfo = call.excinfo
    verdict = excinfo is not None and getattr(excinfo.value, "pytrace", True) is False
    as_pytest = not case or excinfo is None or verdict or call.when != "call"
    if as_pytest or not native_wanted(item.config):  # not a case's exception, or --tb chosen
        yield
        return
    item.repr_failure = lambda info, *args, **kwargs: _native(item, info)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del item.repr_failure  # the class's own again


#: Python's first line of a traceback, and what a case's shows instead: a bare "Traceback" in a
#: run's output stays the mark of an error of the suite's own (an INTERNALERROR, a usage error)
PYTHON_HEADER = "Traceback (most recent call last):\n"
CASE_HEADER = "The case raised (most recent call last; --tb=long: pytest's format):\n"


def _native(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:
    """The exception as Python prints it, from the test function's frame down (the whole
    traceback where that frame is not in it), with pytest's crash line."""
    code = getattr(getattr(item, "obj", None), "__code__", None)
    entries = excinfo.traceback
    start = next((i for i, e in enumerate(entries) if e.frame.code.raw is code), 0)
    excinfo.traceback = entries[start:]
    shown = excinfo.getrepr(style="native")
    for entry in getattr(shown.reprtraceback, "reprentries", ()):  # pytest's ReprEntryNative
        lines = getattr(entry, "lines", None)
        if isinstance(lines, list):
            entry.lines = [CASE_HEADER if line == PYTHON_HEADER else line for line in lines]
    return shown
