"""Case generation (harness/suite.py): registered overloads x dtypes x layouts x paths, ids,
expectations; checked in-process against echo_npu with narrowed options."""

from __future__ import annotations

import os

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


@pytest.fixture
def samples_cache(tmp_path_factory: pytest.TempPathFactory):
    """A sample cache shared by the tests that build the case list of every overload (25-30 s
    cold each): the suite shares its cache between runs and xdist workers the same way; a test
    about what is built or cached keeps its own (tmp_path)."""
    base = tmp_path_factory.getbasetemp()
    # this run's own: the root its xdist workers share, else its base (never a folder that
    # outlives the run, whose answers older code would have cached)
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "shared-samples-cache"
    folder.mkdir(exist_ok=True)
    return folder


def test_cases_are_the_product_of_the_axes(tmp_path) -> None:
    suite = make_suite(
        tmp_path,
        ops="abs,neg",
        dtypes="float32,int64",
        layouts="contiguous,offset",
        values="ordinary",
    )
    cases = suite.case_list.cases()
    ordinary = [c for c in cases if not c.values]
    assert len(ordinary) == 2 * 2 * 2 * 2
    assert CaseId("abs", "int64", "offset", "fallback") in cases
    assert [str(c) for c in cases][:2] == [
        "abs-float32-contiguous-native",
        "abs-float32-contiguous-fallback",
    ]
    # the modes: -grad for the floating dtype on the contiguous layout (offset is not a grad
    # layout), both paths; abs and neg write nothing, so no -inference cases
    assert sorted(str(c) for c in cases if c.values) == [
        f"{op}-float32-contiguous-{path}-grad"
        for op in ("abs", "neg")
        for path in ("fallback", "native")
    ]


def test_modes_none_leaves_only_the_forward_cases(tmp_path) -> None:
    suite = make_suite(tmp_path, ops="add.out,abs", dtypes="float32", modes="none")
    assert not [c for c in suite.case_list.cases() if c.values in ("grad", "inference")]
    assert suite.mode_account() == {}


def test_inference_cases_for_out_and_inplace_overloads_only(tmp_path) -> None:
    suite = make_suite(tmp_path, ops="add.out,add_.Tensor,abs", dtypes="float32,int64")
    inference = sorted(str(c) for c in suite.case_list.cases() if c.values == "inference")
    assert inference == [
        f"{op}-float32-contiguous-{path}-inference"
        for op in ("add.out", "add_.Tensor")
        for path in ("fallback", "native")
    ]
    account = suite.mode_account()
    assert "abs" in account["grad"] and "add.out" not in account["grad"]
    assert any("add.out" in names for names in account["no_grad"].values())


def test_op_specs_restrict_layouts_and_dtypes(tmp_path) -> None:
    suite = make_suite(tmp_path, ops="_local_scalar_dense", dtypes="float32", paths="native")
    assert {c.layout for c in suite.case_list.cases()} <= set(suite.options.layouts)


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
    hit = [c for c in suite.case_list.cases() if suite.expectations.expectation(c) is not None]
    assert hit and all(c.dtype == "float32" for c in hit)


def test_value_sets_add_contiguous_cases_where_the_schema_allows(tmp_path) -> None:
    suite = make_suite(tmp_path, ops="add.Tensor,abs", dtypes="float32,bool", layouts="offset")
    ids = {str(c) for c in suite.case_list.cases()}
    assert "add.Tensor-float32-contiguous-native-special" not in ids  # contiguous not asked
    suite = make_suite(tmp_path, ops="add.Tensor,abs", dtypes="float32,bool")
    ids = {str(c) for c in suite.case_list.cases()}
    assert "add.Tensor-float32-contiguous-native-special" in ids
    assert "add.Tensor-float32-contiguous-fallback-promotion" in ids
    assert "add.Tensor-bool-contiguous-native-promotion" in ids
    assert "add.Tensor-bool-contiguous-native-special" not in ids  # bool: no special values
    assert "abs-float32-contiguous-native-promotion" not in ids  # one operand
    assert not any(i.endswith("-special") for i in ids if i.startswith("abs-float32-offset"))
    assert CaseId.parse("add.Tensor-float32-contiguous-native-special").values == "special"


def test_default_run_adds_the_model_derived_fallback_set(samples_cache) -> None:
    suite = make_suite(samples_cache, dtypes="float32", layouts="contiguous", values="ordinary")
    fallback = {
        c.overload for c in suite.case_list.cases() if c.overload in suite.case_list.fallback_only
    }
    assert "addmm.out" in fallback  # a linear layer, served by echo_npu's fallback
    assert all(c.path == "fallback" for c in suite.case_list.cases() if c.overload in fallback)
    assert not set(suite.case_list.excluded) & fallback  # left out with a recorded reason
    assert not set(suite.case_list.registered) & fallback
    # --ops narrows the run to what it names; 'none' switches the set off
    narrow = {"dtypes": "float32", "layouts": "contiguous", "values": "ordinary"}
    assert make_suite(samples_cache, ops="abs", **narrow).case_list.fallback_only == []
    assert make_suite(samples_cache, fallback_ops="none", **narrow).case_list.fallback_only == []


def test_fallback_only_dtypes_follow_their_opinfo(samples_cache) -> None:
    suite = make_suite(samples_cache, fallback_ops="bitwise_and.Tensor_out", layouts="contiguous")
    dtypes = {c.dtype for c in suite.case_list.cases() if c.overload == "bitwise_and.Tensor_out"}
    assert "int64" in dtypes and "float32" not in dtypes  # OpInfo: integers and bool only


def test_every_registered_overload_has_samples(samples_cache) -> None:
    """Every overload echo_npu registers is tested, but the calls into its runtime, which have
    no CPU result to compare (their reason named)."""
    from conformance.ops import RUNTIME_CALLS

    suite = make_suite(samples_cache, ops="*")
    untested = suite.case_list.coverage.untested
    assert untested == {o: RUNTIME_CALLS[o] for o in untested}, untested
    n = len(suite.case_list.registered)
    by_key = suite.case_list.by_key  # echo_npu's gelu is at AutogradPrivateUse1
    counts = ", ".join(f"{len(names)} at {key}" for key, names in by_key.items())
    assert by_key["AutogradPrivateUse1"] == ["gelu"]
    assert suite.case_list.coverage.header_lines()[0] == (
        f"coverage: {n - len(untested)} of {n} registered overloads tested ({counts})"
    )


def test_unknown_value_set_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(ConformanceUsageError, match="--values: unknown value set"):
        make_suite(tmp_path, values="ordinary,weird")


def test_coverage_is_computed_for_what_k_keeps(tmp_path) -> None:
    """The coverage account builds samples: under -k only those of the overloads -k keeps."""
    options = read_options(FakeConfig(expectations="none", results="none", dtypes="float32"))
    suite = Suite(options, str(tmp_path), "main", keyword="masked_fill")
    assert suite.case_list.coverage is not None
    assert set(suite.case_list.coverage.selected) == {"masked_fill_.Scalar", "masked_fill_.Tensor"}
    assert suite.case_list.coverage.fallback_tested == []
    n = len(suite.case_list.registered)
    keys = ", ".join(f"{len(v)} at {k}" for k, v in suite.case_list.by_key.items())
    assert suite.case_list.coverage.header_lines()[0] == (
        f"coverage: 2 of {n} registered overloads tested ({keys}), {n - 2} not selected "
        "(--ops or -k)"
    )


def test_a_keyword_run_accounts_for_and_probes_only_the_overloads_it_keeps(tmp_path) -> None:
    """-k masked_fill builds no float32 samples of the decompositions the models call
    (_safe_softmax, addmm, ...): their -grad probe is paid only by runs that keep them;
    computed once."""
    options = read_options(FakeConfig(expectations="none", results="none", dtypes="float32"))
    suite = Suite(options, str(tmp_path), "main", keyword="masked_fill")
    # the default run has it: this run does not keep it
    assert "_safe_softmax" in suite.case_list.grad_only
    account = suite.mode_account()
    assert account["grad"] and all("masked_fill" in o for o in account["grad"])
    assert all("masked_fill" in o for o in account["grad_only"])
    assert not [key for key in suite.samples._calls if key[0] == "_safe_softmax"]
    assert suite.mode_account() is account
    # nor does choosing the cases it collects (the -arguments and -grad probes)
    assert suite.case_list.collected_cases()
    assert all("masked_fill" in key[0] for key in suite.samples._calls)


def test_fallback_ops_all_keeps_the_grad_cases_of_the_models_decompositions(samples_cache) -> None:
    """--fallback-ops all (the nightly) is a superset of the default run: the decompositions the
    models call keep their -grad cases (they are served by no fallback, so 'all' adds none)."""
    options = read_options(
        FakeConfig(expectations="none", results="none", dtypes="float32", fallback_ops="all")
    )
    suite = Suite(options, str(samples_cache), "main", keyword="_log_softmax and grad")
    assert "_log_softmax" in suite.case_list.grad_only
    cases = [str(c) for c in suite.case_list.cases()]
    assert "_log_softmax-float32-contiguous-native-grad" in cases


def test_what_k_keeps_is_asked_again_once_the_coverage_is_known(tmp_path) -> None:
    """The accounts ask which overloads -k keeps (remembered); once the coverage account says a
    dtype has no samples, an overload whose only kept cases are of that dtype is kept no more
    (the mode and argument accounts, asked after it, must not name it)."""
    from types import SimpleNamespace

    options = read_options(
        FakeConfig(
            expectations="none",
            results="none",
            dtypes="float32,float16",
            ops="abs,neg",
            modes="none",
        )
    )
    suite = Suite(options, str(tmp_path), "main", keyword="abs and float16")
    cases = suite.case_list
    cases.coverage = None  # not known yet: every dtype has samples
    assert cases.kept_by_keyword(["abs", "neg"], False) == ["abs"]
    cases.coverage = SimpleNamespace(missing=lambda overload, dtype: dtype == "float16")
    assert cases.kept_by_keyword(["abs", "neg"], False) == []
