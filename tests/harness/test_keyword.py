"""The -k prefilter (harness/keyword.py) keeps every case pytest's -k keeps."""

from __future__ import annotations

import pytest

from conformance.harness.keyword import keyword_filter

IDS = [
    "masked_fill_.Scalar-float32-transposed-native",
    "masked_fill_.Tensor-int64-contiguous-fallback-special",
    "add.Tensor-int64-contiguous-native-promotion",
    "addmm.out-float32-offset-fallback",
    "abs-bool-zero_dim-native",
]


def pytest_like(expression: str, case_id: str) -> bool:
    """What pytest's -k sees for a case item: its name, the module and the package."""
    from _pytest.mark.expression import Expression

    names = [f"test_matches_cpu[{case_id}]", "test_conformance.py", "conformance"]
    return Expression.compile(expression).evaluate(
        lambda sub: any(sub.lower() in n.lower() for n in names)
    )


@pytest.mark.parametrize(
    "expression",
    ["masked_fill", "MASKED_FILL", "add and int64", "special or promotion", "(abs or addmm) and o"],
)
def test_keeps_what_pytest_keeps(expression):
    keep = keyword_filter(expression)
    assert keep is not None
    for case_id in IDS:
        assert keep(case_id) == pytest_like(expression, case_id), case_id


@pytest.mark.parametrize("expression", ["", None, "not native", "add and not int64", "a(b=1"])
def test_leaves_negations_and_oddities_to_pytest(expression):
    assert keyword_filter(expression) is None


def test_matches_module_and_package_names_like_pytest():
    keep = keyword_filter("test_conformance")
    assert all(keep(i) for i in IDS)
