"""harness/terminal.py: which -r characters a user asked for, and skip reasons grouped."""

from __future__ import annotations

import pytest

from conformance.harness.terminal import asked_report_chars, skip_reason
from conformance.record import CaseRecord


@pytest.mark.parametrize(
    ("args", "addopts", "asked"),
    [
        ([], "", ""),  # an ini file's -ra is not in the command line
        (["conformance", "-rs"], "", "s"),
        (["-r", "fE", "conformance"], "", "fE"),
        (["-ra"], "", "sxXEf"),
        ([], "-rA -q", "PpsxXEf"),
        (["-rN"], "-ra", ""),  # the command line comes after PYTEST_ADDOPTS
        (["--results", "-r"], "", ""),  # an option's value is not a flag (no chars follow)
    ],
)
def test_report_chars_the_user_asked_for(args, addopts, asked):
    assert asked_report_chars(args, addopts) == asked


def test_skip_reasons_group_by_reason_whatever_the_op_and_layout():
    def rec(op, layout, message):
        case = f"test_matches_cpu[{op}-float32-{layout}-native]"
        data = {"op": op, "overload": "default", "layout": layout, "message": message, "id": case}
        return CaseRecord.from_json(data)

    text = "no sample of {} has an input that the '{}' layout applies to"
    a = skip_reason(rec("abs", "channels_last", text.format("abs", "channels_last")))
    t = skip_reason(rec("t", "zero_dim", text.format("t", "zero_dim")))
    assert a == t == "no sample of <op> has an input that the '<layout>' layout applies to"
    step = "Skipped: unsupported: no kernel for aten::lerp.Scalar_out (step: Adam(lr=0.01))"
    assert skip_reason(CaseRecord.from_json({"op": "scenario", "message": step})) == (
        "unsupported: no kernel for aten::lerp.Scalar_out"
    )
