"""The upstream generator's evidence rules on synthetic records: which modelled test sees which
measured failure (conformance/upstream/seeing.py), tolerances, crashes, capabilities, and the
results it refuses (a partial run: one line, exit 2)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conformance.errors import ConformanceUsageError
from conformance.record import CaseRecord
from conformance.upstream.__main__ import main
from conformance.upstream.api import KNOWN, api_for
from conformance.upstream.evidence import build, measured_capabilities
from conformance.upstream.models import model
from conformance.upstream.opinfos import OpInfoView
from conformance.upstream.render import render

META = {
    "torch": torch.__version__,
    "backend": "echo_npu",
    "device": "npu",
    "coverage": {"registered": ["relu", "exp", "abs", "tril", "mm", "index_select"]},
    "profile": {"compiler": {"value": None}},
}
NAN = "device 0.0 vs cpu nan"


def _record(
    case: str, status: str = "failed", check: str = "values", sample: str = "",
    first: str = NAN, **extra,
) -> CaseRecord:  # fmt: skip
    """A record of `case`; a failure names `sample` (default: `<overload>(<dtype>[9])`) and, for
    values, its first differing element `first`."""
    overload, dtype, layout, path, *values = case.split("-")
    op, _, tag = overload.partition(".")
    sample = sample or f"{overload}({dtype}[9])"
    message = (
        f"[{check}] output: 3/9 elements differ; first at [6]: {first}\n"
        f"  sample: {sample} (layout {layout}, path {path}, allocator malloc)"
    )
    return CaseRecord(
        id=f"test_matches_cpu[{case}]", status=status, op=op, overload=tag or "default",
        dtype=dtype, layout=layout, path=path, check=check if status != "passed" else None,
        message=message if status != "passed" else None, family="ops",
        extra={"values": values[0]} if values else {}, **extra,
    )  # fmt: skip


def _passing(case: str, **extra) -> CaseRecord:
    return _record(case, status="passed", **extra)


def _build(records, **kwargs):
    return build([(META, records)], source="synthetic", **kwargs)


def _entries(config) -> list[tuple[str, str, list[str], str]]:
    return sorted(
        (o.op, o.kind, sorted(o.dtypes), o.test.name if o.test else "") for o in config.overrides
    )


@pytest.fixture(scope="module")
def view() -> OpInfoView:
    return OpInfoView(None)


def _call(view: OpInfoView, op: str, dtype: str, inputs: str, holding: str = "") -> str:
    """A signature the OpInfo's test of `inputs` makes (on inputs of class `holding`)."""
    calls = view.calls(op, dtype, inputs)
    return sorted(s for s in calls.seen if calls.made(s, holding=holding))[0]


def test_a_nan_failure_of_a_ufunc_is_seen_by_the_extremal_test_alone() -> None:
    """relu turning NaN into 0 (its ordinary samples pass): only the reference-numerics test
    whose inputs hold NaN sees it; routing, the suite's layouts and runs that never ran don't."""
    config = _build([
        _record("relu-float32-contiguous-native-special"),
        _passing("relu-float32-contiguous-native"),
        _record("exp-float32-contiguous-native", check="path"),  # routing: not seen upstream
        _record("abs-float32-transposed-native"),  # the suite's layout, not a test's
        _record("abs-float64-contiguous-native", status="not-run", check=""),  # never ran
        _record("exp-float64-contiguous-native", first="device 2.0 vs cpu 3.0"),
    ])  # fmt: skip
    extremal = "TestUnaryUfuncs.test_reference_numerics_extremal"
    assert _entries(config) == [("nn.functional.relu", "xfail", ["float32"], extremal)]
    lines = "\n".join(config.not_excused)
    assert "exp-float32-contiguous-native: no upstream test sees it" in lines
    assert "abs-float32-transposed-native: no upstream test sees it" in lines
    assert "exp-float64-contiguous-native: no upstream test sees it" in lines  # shapes unknown
    assert "shapes of its own" in lines


def test_a_special_failure_whose_ordinary_twin_fails_too_excuses_no_generated_test() -> None:
    config = _build([
        _record("relu-float32-contiguous-native-special"),
        _record("relu-float32-contiguous-native", first="device 2.0 vs cpu 3.0"),
    ])  # fmt: skip
    assert not config.overrides
    assert any("may depend on shapes" in line for line in config.not_excused)


def test_a_nan_failure_excuses_no_test_of_finite_inputs(view: OpInfoView) -> None:
    """mm turning NaN into 0, measured on the suite's special values: test_compare_cpu makes
    that very call, but on finite inputs only, so it would pass: no entry."""
    sample = _call(view, "mm", "float32", "reference")
    config = _build([
        _record("mm-float32-contiguous-native-special", sample=sample),
        _passing("mm-float32-contiguous-native"),
    ])  # fmt: skip
    assert not config.overrides
    assert any(
        "mm-float32-contiguous-native-special: no upstream test sees it" in line
        and "holding nonfinite values" in line
        for line in config.not_excused
    ), config.not_excused


def test_a_value_failure_is_seen_by_compare_cpu_beyond_its_tolerance(view: OpInfoView) -> None:
    sample = _call(view, "tril", "float32", "reference")
    beyond = _record("tril-float32-contiguous-native", sample=sample, first="device 5.0 vs cpu 1.0")
    assert ("tril", "xfail", ["float32"], "TestCommon.test_compare_cpu") in _entries(
        _build([beyond])
    )
    within = _record("tril-float32-contiguous-native", sample=sample,
                     first="device 1.0004 vs cpu 1.0")  # fmt: skip
    config = _build([within])
    assert {t for *_, t in _entries(config)} == {  # tril_ (CPU's) disagrees at 1.3e-6
        "TestCommon.test_variant_consistency_eager"
    }
    alone = _build([within], tests=[model("TestCommon.test_compare_cpu")])
    assert not alone.overrides
    assert any("within the test's tolerance" in line for line in alone.not_excused)
    # --test narrows the tests an entry applies to
    only = _build([beyond], tests=[model("TestCommon.test_noncontiguous_samples")])
    assert not only.overrides


def test_a_noncontiguous_only_failure_is_the_noncontiguous_tests(view: OpInfoView) -> None:
    """Seen by test_noncontiguous_samples where the contiguous twin passed (the device against
    itself), never by test_compare_cpu (contiguous inputs)."""
    sample = _call(view, "index_select", "float32", "sample-noncontiguous")
    failing = _record("index_select-float32-noncontiguous-native", sample=sample,
                      first="device 7.0 vs cpu 1.5")  # fmt: skip
    config = _build([failing, _passing("index_select-float32-contiguous-native")])
    assert _entries(config) == [
        ("index_select", "xfail", ["float32"], "TestCommon.test_noncontiguous_samples")
    ]
    both = _build([failing, _record("index_select-float32-contiguous-native", sample=sample,
                                    first="device 7.0 vs cpu 1.5")])  # fmt: skip
    assert ("index_select", "xfail", ["float32"], "TestCommon.test_noncontiguous_samples") not in (
        _entries(both)
    )  # the device may agree with itself
    assert any("may agree with itself" in line for line in both.not_excused)


def test_variants_that_disagree_on_the_device_are_the_variant_tests(view: OpInfoView) -> None:
    """test_variant_consistency_eager sees an in-place failure whose function passed, an
    in-place result that is not its input, and a failing function whose in-place variant
    passed or is CPU's (no kernel of the backend's): not variants that fail alike."""
    variant = "TestCommon.test_variant_consistency_eager"
    sample = _call(view, "abs", "float32", "sample")
    inplace = sample.replace("abs(", "abs_(", 1)
    wrong = {"sample": inplace, "first": "device 5.0 vs cpu 1.0"}
    config = _build([_record("abs_-float32-contiguous-native", **wrong),
                     _passing("abs-float32-contiguous-native")])  # fmt: skip
    assert _entries(config) == [("abs", "xfail", ["float32"], variant)]
    both = {**META, "coverage": {"registered": ["abs", "abs_"]}}  # abs_: the backend's kernel
    alike = build([(both, [_record("abs_-float32-contiguous-native", **wrong),
                           _record("abs-float32-contiguous-native", sample=sample)])],
                  source="synthetic")  # fmt: skip
    assert variant not in {t for *_, t in _entries(alike)}
    assert any("the variants may agree" in line for line in alike.not_excused)
    returns_new = _record("abs_-float32-contiguous-native", check="inplace", sample=inplace)
    assert _entries(_build([returns_new])) == [("abs", "xfail", ["float32"], variant)]
    tril = _call(view, "tril", "float32", "sample")
    fn_wrong = _record("tril-float32-contiguous-native", sample=tril, first="device 5.0 vs cpu 1.0")
    assert ("tril", "xfail", ["float32"], variant) in _entries(_build([fn_wrong]))  # tril_: CPU's


def test_a_missing_kernel_is_seen_by_every_test_of_the_op_and_dtype() -> None:
    raised = _record("exp-float64-contiguous-native", status="unsupported", check="unsupported",
                     sample="exp(float64[20])")  # fmt: skip
    raised.extra["unsupported_dtype"] = "float64"
    config = _build([raised, _passing("abs-float64-contiguous-native")])
    assert {(op, kind, tuple(d)) for op, kind, d, _ in _entries(config)} == {
        ("exp", "xfail", ("float64",))
    }
    assert {t for *_, t in _entries(config)} == {
        f"TestUnaryUfuncs.test_reference_numerics_{k}"
        for k in ("normal", "small", "large", "extremal")
    }


def test_a_crash_skips_every_test_of_the_op_and_dtype() -> None:
    """A crash anywhere (a -grad case, another layout) skips each OpInfo that may make the call:
    a crash takes PyTorch's test process down; a crash no OpInfo reaches is named instead."""
    crash = _record("abs-float64-contiguous-native", status="crashed", check="crash")
    in_grad = _record("neg-float64-transposed-native-grad", status="crashed", check="crash")
    unknown = _record("_local_scalar_dense-float64-contiguous-native", status="crashed",
                      check="crash")  # fmt: skip
    config = _build([crash, in_grad, unknown])
    assert [(o.op, o.kind, o.dtypes) for o in config.overrides] == [
        ("abs", "skip", {"float64"}),
        ("neg", "skip", {"float64"}),
    ]
    assert all(o.reason.startswith("crash: ") for o in config.overrides)
    assert any("_local_scalar_dense" in line and "no OpInfo test" in line
               for line in config.not_excused)  # fmt: skip


def test_tolerances_are_measured_capped_and_never_cover_a_failure(view: OpInfoView) -> None:
    records = [
        _passing("tril-float32-contiguous-native", max_abs_err=3e-3, max_rel_err=3e-3),
        _passing("mm-float32-contiguous-native", max_abs_err=1.0, max_rel_err=1.0),
        _passing("index_select-float32-contiguous-native", max_abs_err=3e-3, max_rel_err=3e-3),
        _record("index_select-float32-noncontiguous-native",  # a failure: no tolerance
                sample=_call(view, "index_select", "float32", "sample-noncontiguous"),
                first="device 5.0 vs cpu 1.0"),
    ]  # fmt: skip
    config = _build(records)
    tolerances = [o for o in config.overrides if o.kind == "tolerance"]
    assert [(o.op, o.test.name) for o in tolerances] == [("tril", "TestCommon.test_compare_cpu")]
    assert tolerances[0].atol == pytest.approx(3e-3)
    assert any(line.startswith("mm float32 TestCommon.test_compare_cpu") for line in
               config.not_excused)  # fmt: skip
    assert "atol=0.003" in render(config, "upstream_config.py")


def test_torch_2_15_declares_capabilities_from_the_run() -> None:
    records = [_passing("relu-bfloat16-contiguous-native")]
    config = _build(records)
    caps = measured_capabilities(records, set())
    newer = dataclasses.replace(config, api=KNOWN["2.15"], capabilities=caps)
    text = render(newer, "upstream_config.py")
    compile(text, "upstream_config.py", "exec")
    block = text.split("CAPABILITIES = {")[1].split("}")[0]
    assert '"dtype.bf16": True' in block and '"dtype.fp8": False' in block
    assert "PrivateUse1TestBase._capabilities = classmethod(" in text
    assert "CAPABILITIES" not in render(config, "upstream_config.py")


def test_input_kernels_the_tests_need_are_named_when_missing() -> None:
    lacking = {**META, "coverage": {"registered": ["relu", "empty.memory_format"]}}
    records = [_passing("relu-float32-contiguous-native")]
    config = build([(lacking, records)], source="synthetic")
    assert [line.split(":")[0] for line in config.prerequisites] == ["uniform_"]
    assert "Missing before any op is judged" in render(config, "upstream_config.py")
    served = {**lacking, "coverage": {**lacking["coverage"], "has_fallback": True}}
    assert not build([(served, records)], source="synthetic").prerequisites


def test_what_the_run_did_not_measure_is_named_and_left_out() -> None:
    config = _build([_passing("relu-float32-contiguous-native")])
    assert "nn.functional.relu" in config.allowlist and "tril" not in config.allowlist
    assert "tril: none of tril ran" in config.unmeasured
    assert any(line.startswith("nn.functional.relu: dtypes") and "float64" in line
               for line in config.unmeasured)  # fmt: skip
    assert "tril" in _build([], include_unmeasured=True).allowlist


def test_results_without_coverage_are_refused() -> None:
    bare = {k: v for k, v in META.items() if k != "coverage"}
    with pytest.raises(ConformanceUsageError, match="no coverage"):
        build([(bare, [])], source="synthetic")


def test_a_case_flaky_between_runs_excuses_nothing() -> None:
    fails = _record("relu-float32-contiguous-native-special")
    passes = _record("relu-float32-contiguous-native-special", status="passed")
    config = build([(META, [fails]), (META, [passes])], source="synthetic")
    assert not config.overrides
    assert any("flaky" in line for line in config.not_excused)


def test_a_torch_without_the_api_is_a_one_line_error() -> None:
    with pytest.raises(ConformanceUsageError, match=r"torch 2.12.0 has no set_test_configs"):
        api_for("2.12.0")
    with pytest.raises(ConformanceUsageError, match="does not know"):
        api_for("2.16.0")
    with pytest.raises(ConformanceUsageError, match="no torch version"):
        api_for("")
    assert api_for("2.15.0+cu128").capabilities and not api_for("2.13.0").capabilities


def test_an_unmodelled_test_is_a_one_line_error(capsys, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main([str(tmp_path), "-o", str(tmp_path / "c.py"), "--test", "TestFoo.test_bar"])
    err = capsys.readouterr().err
    assert "not a modelled upstream test; modelled: TestCommon.test_compare_cpu" in err


# ---- partial results: refused with one line, exit 2 ---------------------------------------------
def _results(folder: Path, records: list[CaseRecord], **meta) -> Path:
    folder.mkdir(parents=True)
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    run = {**META, "finished": "2026-11-29T00:00:00", "statuses": statuses, **meta}
    (folder / "run.json").write_text(json.dumps(run))
    lines = [json.dumps(CaseRecord.from_json(dataclasses.asdict(r)).to_json()) for r in records]
    (folder / "cases-gw0.jsonl").write_text("\n".join(lines) + "\n")
    return folder


RECORDS = [_passing(f"relu-float32-contiguous-native-{v}") for v in ("special", "promotion")] + [
    _passing("relu-float32-contiguous-native")
]


def _one_line_error(capsys, folder: Path, *more: str) -> str:
    assert main([str(folder), "-o", str(folder.parent / "c.py"), *more]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    _one_line_error(capsys, tmp_path / "missing")


def test_a_cases_file_cut_short_is_refused(tmp_path: Path, capsys) -> None:
    folder = _results(tmp_path / "r", RECORDS)
    cases = folder / "cases-gw0.jsonl"
    whole = cases.read_text().splitlines()
    cases.write_text("\n".join(whole[:2]) + "\n")  # cut at a line boundary: no broken line
    assert "hold 2 of the 3 cases run.json counts" in _one_line_error(capsys, folder)
    cases.write_text("\n".join(whole)[:-40])  # cut mid-line
    assert "cut short" in _one_line_error(capsys, folder)
    assert main([str(folder), "-o", str(tmp_path / "c.py"), "--allow-partial"]) == 0
    assert "Accepted with --allow-partial" in (tmp_path / "c.py").read_text()


def test_an_unfinished_run_is_refused(tmp_path: Path, capsys) -> None:
    folder = _results(tmp_path / "r", RECORDS, finished=None)
    assert "did not finish" in _one_line_error(capsys, folder)


def test_a_corrupt_run_json_is_refused(tmp_path: Path, capsys) -> None:
    folder = _results(tmp_path / "r", RECORDS)
    (folder / "run.json").write_text('{"torch": "2.13')
    assert "run.json is corrupt" in _one_line_error(capsys, folder)
