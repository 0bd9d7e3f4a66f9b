"""The -k prefilter (harness/keyword.py) keeps every case pytest's -k keeps."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize(
    "expression",
    [
        "masked_fill",
        "add and int64",
        "special or promotion",
        "(abs or addmm) and o",
        "Tensor-int64",  # spans two parts of an id
        "cpu[abs",  # spans the test name's bracket
        "masked_fill and bfloat16",  # a word no id of this run has
        "mm.o",
    ],
)
def test_an_overload_is_dropped_only_where_none_of_its_ids_is_kept(expression):
    """`may_keep(overload, words)` is False only where no id of the overload made of `words`
    is kept: the case list builds no id, asks no sample for such an overload."""
    keep = keyword_filter(expression)
    words = ["float32", "int64", "bool", "transposed", "contiguous", "offset", "zero_dim"]
    words += ["native", "fallback", "special", "promotion"]
    for case_id in IDS:
        overload = case_id.split("-")[0]
        if not keep.may_keep(overload, words):
            kept = [i for i in IDS if i.startswith(f"{overload}-") and keep(i)]
            assert not kept, (expression, kept)
    may = {i.split("-")[0] for i in IDS if keep.may_keep(i.split("-")[0], words)}
    if expression in ("masked_fill", "masked_fill and bfloat16"):
        assert "add.Tensor" not in may and "abs" not in may  # the pruning happens
    if expression == "masked_fill and bfloat16":
        assert not may
    if expression in ("Tensor-int64", "cpu[abs"):  # a span: nothing is decided by the name
        assert len(may) == len({i.split("-")[0] for i in IDS})


@pytest.mark.parametrize("expression", ["", None, "not native", "add and not int64", "a(b=1"])
def test_leaves_negations_and_oddities_to_pytest(expression):
    assert keyword_filter(expression) is None


def test_matches_module_and_package_names_like_pytest():
    keep = keyword_filter("test_conformance")
    assert all(keep(i) for i in IDS)


FAMILY_CONFTEST = """
import os

from pathlib import Path

import pytest

from conformance.harness.keyword import kept_params

IDS = ["alpha-float32", "beta-int64", "gamma-contiguous", "delta"]


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        params = [
            pytest.param(i, id=i, marks=[pytest.mark.own_mark] if i.startswith("b") else [])
            for i in IDS
        ]
        if os.environ.get("PREFILTER") == "1":
            params = kept_params(metafunc, params)
        metafunc.parametrize("case", params)
"""

FAMILY_TESTS = """
from pathlib import Path

import pytest

pytestmark = pytest.mark.module_mark


class TestGroup:
    def test_one(self, case):
        pass


def test_two(case):
    pass


test_two.an_attribute = True
"""


@pytest.mark.parametrize(
    "expression",
    [
        "alpha",
        "BETA or delta",
        "TestGroup and int64",
        "test_two",
        "an_attribute and gamma",
        "module_mark",
        "own_mark",
        "test_family",
        "parametrize",
        "(alpha or delta) and one",
        "nothing_matches",
    ],
)
def test_a_family_test_keeps_what_pytest_keeps(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, expression: str
) -> None:
    """kept_params drops exactly the items pytest's own -k would deselect: the names of the
    class, module and package, the function's attributes and every mark count."""
    pytester.makeconftest(FAMILY_CONFTEST)
    pytester.makepyfile(test_family=FAMILY_TESTS)
    pytester.makeini("[pytest]\nmarkers =\n    own_mark\n    module_mark\n")

    def selected(prefilter: str) -> set[str]:
        monkeypatch.setenv("PREFILTER", prefilter)
        result = pytester.runpytest_inprocess(
            "-p",
            "no:conformance",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "--co",
            "-q",
            "-k",
            expression,
        )
        return {line for line in result.outlines if "::" in line and "NOTSET" not in line}

    assert selected("1") == selected("0")


def test_every_family_that_generates_cases_prefilters_them() -> None:
    """A family's generated test hands its params to kept_params: without it, `-k masked_fill`
    builds an item for each of its cases only for pytest to deselect it."""
    root = Path(__file__).resolve().parents[2] / "conformance"
    generating = [p for p in root.glob("*/conftest.py") if "metafunc.parametrize(" in p.read_text()]
    assert generating  # the modules, collectives and autocast families
    for path in generating:
        assert "kept_params(metafunc," in path.read_text(), path
