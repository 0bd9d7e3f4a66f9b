"""The end of a run in the terminal (harness/terminal.py): the conformance summary last, skips one
line per reason, pytest's per-test lines only when the user asks with -r, and the header's key
lines under -q (the self-tests' runs use -q; pyproject.toml's ini addopts give -ra)."""

from __future__ import annotations

import pytest

pytest.importorskip("echo_npu")

ARGS = ("--ops", "abs", "--dtypes", "float32", "--paths", "native", "--values", "ordinary")


def test_the_summary_comes_last_and_pytests_lines_only_when_asked(run_suite):
    run = run_suite(*ARGS)
    assert run.returncode == 0, run.output[-3000:]
    out = run.output
    first = out.lstrip().splitlines()[0]
    assert first.startswith("conformance: backend echo_npu (")  # -q: the key header lines
    assert "conformance: expectations: " in out and "conformance: isolation: " in out
    assert "SKIPPED [" not in out  # the ini file's -ra is a default, not a request
    summary = out[out.index("conformance: summary") :].splitlines()
    assert "skipped: 1 case(s) with nothing to compare, 1 reason(s) (-rs lists them" in summary[3]
    assert summary[4].split() == [
        "1", "no", "sample", "of", "<op>", "has", "an", "input", "that", "the", "'<layout>'",
        "layout", "applies", "to", "(channels_last", "1)",
    ]  # fmt: skip
    assert summary[-3] == "conformance: 9 collected = 9 recorded"
    assert summary[-1].startswith("8 passed, 1 skipped")  # only pytest's count line follows

    asked = run_suite(*ARGS, "-rs")
    assert "SKIPPED [1] " in asked.output and "'channels_last' layout" in asked.output
    tail = asked.output[asked.output.index("conformance: summary") :]
    assert "skipped: " not in tail  # listed by pytest, not folded
