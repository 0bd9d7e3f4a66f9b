"""Case generation (harness/suite.py): registered overloads x dtypes x layouts x paths, ids,
expectations; checked in-process against echo_npu with narrowed options."""

from __future__ import annotations

import pytest

from conformance.errors import ConformanceUsageError
from conformance.harness.options import read_options
from conformance.harness.suite import Suite
from conformance.record import CaseId
from tests.harness.test_options import FakeConfig


def make_suite(tmp_path, **given: str) -> Suite:
    given.setdefault("expectations", "none")
    given.setdefault("results", "none")
    return Suite(read_options(FakeConfig(**given)), str(tmp_path), "main")


def test_cases_are_the_product_of_the_axes(tmp_path) -> None:
    suite = make_suite(tmp_path, ops="abs,neg", dtypes="float32,int64", layouts="contiguous,offset")
    cases = suite.cases()
    assert len(cases) == 2 * 2 * 2 * 2
    assert CaseId("abs", "int64", "offset", "fallback") in cases
    assert [str(c) for c in cases][:2] == [
        "abs-float32-contiguous-native",
        "abs-float32-contiguous-fallback",
    ]


def test_op_specs_restrict_layouts_and_dtypes(tmp_path) -> None:
    suite = make_suite(tmp_path, ops="_local_scalar_dense", dtypes="float32", paths="native")
    assert {c.layout for c in suite.cases()} <= set(suite.options.layouts)


def test_unknown_op_names_the_registered_ones(tmp_path) -> None:
    with pytest.raises(ConformanceUsageError, match="--ops: no_such_op matches no overload"):
        make_suite(tmp_path, ops="no_such_op")


def test_expectation_lookup_by_case(tmp_path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[[entry]]\npattern = "abs-float32-*"\nstatus = "xfail"\ncategory = "backend-bug"\n'
        'reason = "r"\n'
    )
    suite = make_suite(tmp_path, ops="abs", dtypes="float32,int64", expectations=str(manifest))
    hit = [c for c in suite.cases() if suite.expectation(c) is not None]
    assert hit and all(c.dtype == "float32" for c in hit)
