"""The report's coverage section comes from run.json's `coverage` (engine/coverage.py)."""

from conformance.report.markdown import coverage_lines

COVERAGE = {
    "registered": ["abs", "abs_", "set_.source_Tensor"],
    "selected": ["abs", "abs_", "set_.source_Tensor"],
    "tested": ["abs", "abs_"],
    "untested": {"set_.source_Tensor": "no samples (no OpInfo entry and no op spec)"},
    "no_samples": {"abs": ["bool"], "set_.source_Tensor": ["float32"]},
    "schemaless": ["isfinite.out"],
    "has_fallback": True,
    "fallback_only": ["nonzero", "cumsum"],
    "fallback_tested": ["nonzero"],
}


def test_coverage_section_names_what_is_not_tested_and_why():
    text = "\n".join(coverage_lines(COVERAGE))
    assert "3 registered aten overloads, 2 tested, 1 untested" in text
    assert "untested `set_.source_Tensor`: no samples (no OpInfo entry and no op spec)" in text
    assert "not collected): `abs` (bool)" in text and "`set_.source_Tensor` (" not in text
    assert "without an aten schema (never called): `isfinite.out`" in text
    assert "2 overloads reach the backend only through its boxed fallback; 1 tested" in text


def test_no_coverage_no_section():
    assert coverage_lines(None) == [] and coverage_lines({}) == []
