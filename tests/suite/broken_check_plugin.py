"""A pytest plugin for self-tests: one extra sample check that raises for `abs`, as a bug of the
suite's own checks would (`-p tests.suite.broken_check_plugin`)."""

from __future__ import annotations

from conformance.engine.checks import Sample, sample_check


@sample_check("broken", "a check of ours that raises (self-test only)")
def _broken(s: Sample) -> None:
    if s.overload == "abs":
        raise KeyError("a bug of the suite")
