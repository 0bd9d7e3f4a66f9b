"""harness/terminal.py: which -r characters a user asked for, and skip reasons grouped."""

from __future__ import annotations

import pytest

from conformance.harness.terminal import asked_report_chars, lazy_time_line, skip_reason
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


def test_the_lazy_runtimes_time_and_the_suites_own_share():
    """Issue 61: on a lazy device the summary tells the runtime's compile and execute time from
    the suite's own (the rest of the cases' time), as a share and per case."""

    def rec(op, duration, **extra):
        data = {"op": op, "overload": "default", "id": f"test_matches_cpu[{op}]"}
        return CaseRecord.from_json({**data, "duration": duration, **extra})

    records = [
        rec("cosh", 10.0, compile_s=6.0, execute_s=1.0),
        rec("sinh", 6.0, compile_s=2.0, execute_s=1.0),
        rec("abs", 4.0),  # an eager case (no metric): not counted
    ]
    line = lazy_time_line(records)
    assert line is not None
    assert "over 2 case(s): compiling 8.0 s, executing 2.0 s" in line
    assert "the suite's own 6.0 s = 38 % of the cases' 16 s (3000 ms a case)" in line
    assert "longest compiles: cosh 6.0 s, sinh 2.0 s" in line
    no_execute = lazy_time_line([rec("cosh", 10.0, compile_s=6.0)])
    assert "(execute time not measured); the suite's own 4.0 s = 40 %" in (no_execute or "")
    assert lazy_time_line([rec("abs", 4.0)]) is None


def test_passed_setup_and_teardown_reports_with_nothing_to_print_leave_the_terminal_stats():
    """pytest scans every report under stats[""] for each failure's teardown sections
    (quadratic in a run with many failures): Terminal keeps there only what pytest would print
    (a teardown report with a teardown section) and every report that did not pass."""
    from types import SimpleNamespace

    from conformance.harness.terminal import Terminal

    stats: dict[str, list] = {}
    reporter = SimpleNamespace(stats=stats)
    plugins = SimpleNamespace(get_plugin=lambda name: reporter)
    config = SimpleNamespace(pluginmanager=plugins, invocation_params=SimpleNamespace(args=()))
    terminal = Terminal(config, lambda tr, status: None)

    def logged(when: str, outcome: str = "passed", sections=()) -> pytest.TestReport:
        report = pytest.TestReport("t.py::x", ("t.py", 0, "x"), {}, outcome, None, when,
                                   sections=list(sections))  # fmt: skip
        if not (report.passed and when != "call"):
            return report  # pytest files it under its outcome
        stats.setdefault("", []).append(report)  # as TerminalReporter does, before us
        terminal.pytest_runtest_logreport(report)
        return report

    logged("setup")
    logged("teardown")
    printed = logged("teardown", sections=[("Captured stdout teardown", "bye")])
    logged("teardown", sections=[("Captured stdout call", "hi")])
    assert stats[""] == [printed]
