"""conformance/findings.py: failing records grouped by root cause."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.findings import (
    crash_class,
    crash_signature,
    finding_key,
    group_findings,
    normalise_message,
)
from conformance.record import CaseRecord


def rec(op: str, dtype: str, layout: str, status: str, check: str | None, message: str, **kw):
    """A record as read from a results line (docs/RESULTS.md)."""
    overload = kw.pop("overload", "Tensor")
    case = f"{op}.{overload}-{dtype}-{layout}-{kw.pop('path', 'native')}"
    data = {
        "id": f"test_matches_cpu[{case}]",
        "op": op,
        "overload": overload,
        "dtype": dtype,
        "layout": layout,
        "path": "native",
        "status": status,
        "check": check,
        "message": message,
        "repro": f"pytest conformance -k '{case}'",
        **kw,
    }
    return CaseRecord.from_json(data)


ASAN = """[crash] the process was killed by signal 6 (SIGABRT) while running this case: \
AddressSanitizer: heap-buffer-overflow on address 0x602000001234 at pc 0x7f00 bp 0x7ffd
--- output ---
==12345==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000001234
WRITE of size 64 at 0x602000001234 thread T0
    #0 0x7f3a in __asan_memcpy (/usr/lib/libasan.so.8+0xfb)
    #1 0x7f3b in echo_npu::masked_fill_kernel(at::Tensor&) /src/aten/masked_fill.cpp:88
    #2 0x7f3c in at::native::cpu_fallback /src/CPUFallback.cpp:10
"""


def test_one_cause_over_ops_dtypes_and_shapes_is_one_finding() -> None:
    records = [
        rec(
            op,
            dt,
            "transposed",
            "failed",
            "strides",
            f"output: strides ({a}, 1) on the device, cpu (1, {b}); dtype torch.{dt}",
        )
        for op, dt, a, b in [
            ("add", "float32", 3, 4),
            ("mul", "int64", 5, 6),
            ("sub", "bfloat16", 1, 2),
        ]
    ]
    records.append(rec("abs", "float32", "contiguous", "passed", None, ""))
    records.append(rec("neg", "float32", "contiguous", "xfailed", "values", "x"))
    (finding,) = group_findings(records)
    assert finding.count == 3 and finding.ops == ["add.Tensor", "mul.Tensor", "sub.Tensor"]
    assert finding.key.check == "strides"
    assert (
        finding.key.message == "output: strides <shape> on the device, cpu <shape>; dtype <dtype>"
    )
    assert finding.title.startswith("strides: output: strides <shape>")
    assert finding.id.startswith("F") and len(finding.id) == 9
    assert finding.representative.dtype == "float32"  # the simplest case
    assert finding.statuses == {"failed": 3}


def test_messages_naming_their_own_op_and_numbers_still_group() -> None:
    a = rec(
        "mul",
        "float32",
        "contiguous",
        "failed",
        "leak",
        "mul.Tensor leaked 1 device block(s) of 48 bytes (aten::mul.Tensor, serial 1234)",
    )
    b = rec(
        "div",
        "float64",
        "offset",
        "failed",
        "leak",
        "div.Tensor leaked 2 device block(s) of 1.5e3 bytes (aten::div.Tensor, serial 7)",
    )
    assert finding_key(a) == finding_key(b)
    assert "<op> leaked <n> device block" in finding_key(a).message


def test_different_checks_messages_or_blockers_are_different_findings() -> None:
    base = rec("add", "float32", "contiguous", "failed", "values", "values differ: max abs 0.5")
    other_check = replace(base, check="dtype")
    other_text = replace(base, message="device raised RuntimeError: not implemented")
    blocked = replace(
        base,
        id="test_matches_cpu[mul.Tensor-float32-offset-fallback]",
        op="mul",
        blocked_by="fill_.Scalar-float32-offset-native",
    )
    findings = group_findings([base, other_check, other_text, blocked])
    assert len(findings) == 4
    assert any("fill_.Scalar is broken, 1 case(s) blocked by it" in f.title for f in findings)


def test_a_broken_foundation_and_the_cases_it_blocks_are_one_finding() -> None:
    own = [
        rec(
            "_copy_from",
            "float32",
            "offset",
            "failed",
            "values",
            "[values] dst: 3/30 differ",
            overload="default",
        ),
        rec(
            "_copy_from",
            "float64",
            "sliced",
            "failed",
            "values",
            "[values] output: 9 differ",
            overload="default",
        ),
    ]
    blocked = [
        rec(
            op,
            "float32",
            "offset",
            "blocked",
            "values",
            f"[blocked] by _copy_from ({op})",
            blocked_by="_copy_from-float32-offset-native",
            path="fallback",
        )
        for op in ("abs", "add", "sum")
    ]
    (finding,) = group_findings([*blocked, *own])
    assert finding.count == 5 and finding.blocked == 3
    assert finding.representative.op == "_copy_from"
    assert finding.title.startswith("_copy_from is broken, 3 case(s) blocked by it: values:")
    alone = group_findings(blocked)  # the foundation's own case did not run
    assert len(alone) == 1 and alone[0].key.check == "foundation"


def test_crashes_group_by_signature_not_by_address() -> None:
    a = rec("masked_fill_", "float32", "transposed", "crashed", "crash", ASAN, overload="Scalar")
    b = rec(
        "masked_fill_",
        "int64",
        "sliced",
        "crashed",
        "crash",
        ASAN.replace("0x602000001234", "0x6020000099aa").replace("12345", "777"),
        overload="Scalar",
    )
    segv = rec(
        "sum",
        "float32",
        "zero_size",
        "crashed",
        "crash",
        "[crash] the process was killed by signal 11 (SIGSEGV) while running this case",
        overload="dim_IntList",
    )
    # the class and, for a sanitizer report, its first own frame (not the signal that ended it)
    assert crash_signature(a) == (
        "AddressSanitizer: heap-buffer-overflow in echo_npu::masked_fill_kernel(at::Tensor&)"
    )
    assert crash_signature(segv) == "segfault"
    assert crash_signature(rec("x", "f", "c", "failed", "values", "SIGSEGV")) == ""
    findings = group_findings([a, b, segv])
    assert [f.count for f in findings] == [2, 1]
    assert "[crash]" not in findings[0].title


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("shape torch.Size([2, 3]) vs torch.Size([3])", "shape <shape> vs <shape>"),
        ("got nan, expected -inf at index 4", "got <n>, expected <n> at index <n>"),
        ("ptr 0xdeadbeef", "ptr <addr>"),
        ("float32 and torch.complex64", "<dtype> and <dtype>"),
        ("first line\nsecond line 42", "first line"),
        ("", ""),
        ("torch 2.10.0+cu128 on gw0", "torch <n>+cu128 on gw0"),
    ],
)
def test_normalise_message(message: str, expected: str) -> None:
    assert normalise_message(message) == expected


def test_biggest_finding_first() -> None:
    small = rec("a", "float32", "contiguous", "error", "harness", "boom")
    big = [rec(f"op{i}", "float32", "contiguous", "failed", "values", "differ") for i in range(3)]
    assert [f.count for f in group_findings([small, *big])] == [3, 1]


NO_KERNEL = "Could not run 'aten::{}' with arguments from the 'pyreg' backend. This could be"


def scenario(name: str, status: str, check: str, message: str, **kw) -> CaseRecord:
    data = {
        "id": name,
        "op": "scenario",
        "overload": name,
        "dtype": "-",
        "layout": "-",
        "path": "scenario",
        "status": status,
        "check": check,
        "message": message,
        **kw,
    }
    return CaseRecord.from_json(data)


def test_a_foundation_without_a_kernel_is_one_finding_named_for_it() -> None:
    """Issue 31: every case and scenario that needs the missing `as_strided` is one finding that
    says so, not a broken `empty_strided`."""
    probe = "raised NotImplementedError: " + NO_KERNEL.format("as_strided")
    records = [
        rec(op, "float32", layout, "blocked", "harness", "[blocked] needs as_strided ...",
            blocked_by=f"as_strided-float32-{layout}-native", blocked_by_probe=probe)
        for op, layout in [("add", "transposed"), ("mul", "offset"), ("cos", "sliced")]
    ]  # fmt: skip
    records.append(
        scenario("test_attention", "blocked", "scenario", "[blocked] needs as_strided ...",
                 blocked_by="as_strided-float32-contiguous-native", blocked_by_probe=probe)
    )  # fmt: skip
    (finding,) = group_findings(records)
    assert finding.title == "as_strided has no kernel on this device: 4 case(s) need it"
    assert finding.count == finding.blocked == 4


def test_kernels_the_device_lacks_are_one_undeclared_finding_listing_them() -> None:
    own = "[unsupported] device raised NotImplementedError [not_implemented]: pyreg: cos is "
    own += "float32 only where cpu computes; not declared: add the kernel"
    needed = "[unsupported] device raised NotImplementedError [not_implemented]: "
    records = [
        rec("cos", "float64", "contiguous", "failed", "unsupported", own, overload="default"),
        rec("cos", "float16", "contiguous", "failed", "unsupported", own, overload="default"),
        rec("mul", "float32", "contiguous", "failed", "unsupported",
            needed + NO_KERNEL.format("sin.out"), values="grad"),
        scenario("test_generate", "failed", "unsupported",
                 "[unsupported] the device has no kernel for gelu.out, which this scenario needs "
                 f"(NotImplementedError: {NO_KERNEL.format('gelu.out')})"),
        rec("cos", "float32", "contiguous", "passed", None, "", overload="default"),
    ]  # fmt: skip
    (finding,) = group_findings(records)
    assert finding.is_unsupported and finding.count == 4
    assert finding.kernels == [
        ("cos", "(float16/float64)"),
        ("gelu.out", "(needed by 1 case(s))"),
        ("sin.out", "(needed by 1 case(s))"),
    ]
    assert finding.title.startswith("unsupported, not declared: 3 kernel(s) the device lacks")
    assert finding.to_json()["kernels"][0] == "cos (float16/float64)"


def test_one_device_error_in_cases_and_scenarios_is_one_finding() -> None:
    """The same error raised by the backend in several ops, a backward and a scenario is one
    code path: one finding, whatever CPU did; a scenario's own assertion is not such an error."""
    text = "RuntimeError [value]: pyreg: expected all tensors on pyreg, got a cpu tensor in {}"
    records = [
        rec("add", "float32", "contiguous", "failed", "error",
            f"[error] device raised {text.format('add.Tensor')}; cpu returned normally"),
        rec("add_", "float64", "contiguous", "failed", "error",
            f"[error] device raised {text.format('add_.Tensor')}, cpu raised RuntimeError "
            "[dtype]: result type Double can't be cast"),
        rec("addmm", "float32", "contiguous", "failed", "grad",
            f"[grad] device raised {text.format('mm')} in backward (grad_output contiguous); "
            "cpu computes", overload="default", values="grad"),
        scenario("test_cpu_scalar", "failed", "scenario",
                 "RuntimeError: pyreg: expected all tensors on pyreg, got a cpu tensor in mul"),
        scenario("test_mix", "failed", "scenario", "AssertionError: add.Tensor: wrong values"),
    ]  # fmt: skip
    findings = group_findings(records)
    assert [f.count for f in findings] == [4, 1]
    assert findings[0].key.message == (
        "device raised RuntimeError: pyreg: expected all tensors on pyreg, got a cpu tensor in <op>"
    )


def test_how_findings_read_a_record_is_what_its_family_declared() -> None:
    """Issue 82: the findings no longer name families: a record carries its family's
    declaration (`extra["findings"]`, harness/families `Family.findings`); records written
    before that read it from a table by family. A scenario whose family declares nothing is not
    keyed by the device's error, and any family that declares it is."""
    from conformance.harness.families import registry

    text = "RuntimeError [value]: pyreg: expected all tensors on pyreg, got a cpu tensor in {}"
    raised = f"[error] device raised {text.format('add.Tensor')}; cpu returned normally"
    op = rec("add", "float32", "contiguous", "failed", "error", raised)
    error = "RuntimeError: pyreg: expected all tensors on pyreg, got a cpu tensor in mul"
    silent = scenario("test_a", "failed", "scenario", error, findings={})
    assert [f.count for f in group_findings([op, silent])] == [1, 1]
    declared = scenario("test_b", "failed", "scenario", error, family="contract",
                        findings={"raised_on_the_device": True})  # fmt: skip
    assert [f.count for f in group_findings([op, declared])] == [2]
    assert scenario("test_c", "failed", "scenario", "x").findings == {"raised_on_the_device": True}
    families = {f.name: dict(f.findings) for f in registry().members}
    assert families["scenarios"] == {"raised_on_the_device": True}
    assert families["collectives"] == {"spans": "collective"}
    assert families["ops"] == families["contract"] == {}


def test_one_random_kernel_is_one_finding_whatever_statistic_saw_it() -> None:
    """A dropout without its scale fails a two-sample test in some cases and its law in
    others: each words it differently, one kernel is wrong (issue 80)."""
    records = [
        rec("dropout", "float32", "contiguous", "failed", "values",
            "output (random draws): not the distribution cpu draws from: Kolmogorov-Smirnov "
            "statistic 0.31 > 0.05 over 4096 draws", overload="default"),
        rec("dropout", "float16", "transposed", "failed", "values",
            "output (random draws): 12 of 4096 device draws above 1.5, the largest of cpu's "
            "4096 draws", overload="default"),
        rec("dropout", "bfloat16", "contiguous", "failed", "values",
            "random draws: dropout p=0.3 of ones, with its backward, 131072 draws in one call: "
            "91826 kept values of an input of ones are not 1/(1-p)", overload="default"),
        rec("normal_", "float32", "contiguous", "failed", "values",
            "random draws: normal mean=2 std=3, 131072 draws in one call: standardised "
            "variance 1.21, expected 1", overload="default"),
    ]  # fmt: skip
    findings = group_findings(records)
    assert sorted(f.count for f in findings) == [1, 3]  # dropout's three, normal_'s own


def test_a_wrong_forward_seen_by_its_grad_cases_is_the_forward_finding() -> None:
    records = [
        rec("lstm", "float32", "contiguous", "failed", "values",
            "output 0: 30/30 elements differ (max abs 0.2)", overload="input"),
        rec("lstm", "float64", "transposed", "failed", "grad",
            "[grad] output 0 of the forward with requires_grad: 30/30 elements differ (max abs "
            "0.2)", overload="input"),  # as engine/gradients.py words it
        rec("gelu", "float32", "contiguous", "failed", "grad",
            "output 0 of the forward with requires_grad: 3/8 elements differ", overload="default"),
    ]  # fmt: skip
    findings = group_findings(records)
    assert sorted(f.count for f in findings) == [1, 2]  # lstm's forward and -grad; gelu's own


def test_a_module_case_naming_a_failing_op_is_that_ops_finding() -> None:
    """echo_npu's bn_running_var_biased fails native_batch_norm's op cases and every BatchNorm
    module case, whose search names native_batch_norm: one kernel, one finding (issue 80). A
    module case naming an op whose own cases pass stays a finding of its own."""
    module = "[module] aten.native_batch_norm.default: running_var after the call: 3/3 differ"
    records = [
        rec("native_batch_norm", "float32", "contiguous", "failed", "values",
            "running_var: 3/3 elements differ (max abs 0.3)", overload="default"),
        CaseRecord.from_json({
            "id": "test_module[nn.BatchNorm2d-float32-train-contiguous-0]", "op": "module",
            "overload": "nn.BatchNorm2d", "status": "failed", "check": "module",
            "message": module + "\n  in nn.BatchNorm2d: running_var after the step differs",
        }),
        CaseRecord.from_json({
            "id": "test_module[nn.GroupNorm-float32-train-contiguous-0]", "op": "module",
            "overload": "nn.GroupNorm", "status": "failed", "check": "module",
            "message": "[module] aten.native_group_norm.default: output 0: 2/8 differ",
        }),
    ]  # fmt: skip
    findings = group_findings(records)
    assert sorted(f.count for f in findings) == [1, 2]
    both = next(f for f in findings if f.count == 2)
    assert both.key.check == "values" and "native_batch_norm" in both.ops


ABORT = "[crash] the process was killed by signal 6 (SIGABRT) while running this case"
SEGV = "[crash] the process was killed by signal 11 (SIGSEGV) while running this case"
HEAP = "[crash] the process was killed by signal 6 (SIGABRT) while running this case: free(): "


def sited(record: CaseRecord, site: str) -> CaseRecord:
    """The record with the op its traced replay died inside (harness/crash_site.py)."""
    return replace(record, extra={"crash_site": site})


def test_aborts_inside_one_op_are_that_ops_finding() -> None:
    """A module's backward and another op's -grad case abort inside neg (their traced replays
    say so): one finding, named for neg, whatever op's case died; a case of the same op and
    class that was not replayed joins its op's site; an abort with no site stays its own."""
    l1 = rec("module", "float32", "contiguous", "crashed", "crash", ABORT, overload="nn.L1Loss")
    l1_eval = rec("module", "float32", "eval", "crashed", "crash", ABORT, overload="nn.L1Loss")
    recip = rec("reciprocal", "float32", "contiguous", "crashed", "crash", ABORT)
    other = rec("div", "float32", "contiguous", "crashed", "crash", ABORT)  # no site known
    findings = group_findings([sited(l1, "neg"), l1_eval, sited(recip, "neg"), other])
    assert [(f.count, f.title) for f in findings] == [
        (3, "crash: abort, inside neg"),
        (1, "crash: abort, in div.Tensor"),
    ], findings
    assert findings[0].key.culprit == "neg"
    assert finding_key(l1_eval).message == ""  # on its own: its op's site comes from the run


def test_a_segfault_names_its_site_only_where_that_ops_own_cases_crash_too() -> None:
    """add's -grad case segfaults inside sum.dim_IntList, whose own case segfaults as well:
    sum's finding. relu's case segfaults inside empty, whose own cases never crash: a heap
    damaged earlier (a write past a block) kills whatever op allocates next, so the site is
    said in the record and the finding stays relu's."""
    add = rec("add", "float32", "contiguous", "crashed", "crash", SEGV)
    summed = rec("sum", "float32", "zero_size", "crashed", "crash", SEGV, overload="dim_IntList")
    relu = rec("relu", "float32", "contiguous", "crashed", "crash", SEGV, overload="default")
    found = group_findings(
        [sited(add, "sum.dim_IntList"), sited(summed, "sum.dim_IntList"), sited(relu, "empty")]
    )
    assert [(f.count, f.title) for f in found] == [
        (2, "crash: segfault, inside sum.dim_IntList"),
        (1, "crash: segfault, in relu"),
    ], found


def test_a_record_whose_own_site_was_rejected_does_not_take_its_ops_site() -> None:
    """The run's site of an op (`by_op`) is for its cases that were not replayed: relu's case
    whose own replay died inside empty (a site rejected: empty's cases never crash) keeps its
    own finding even though another relu case of the same class was named for sum."""
    summed = rec("sum", "float32", "zero_size", "crashed", "crash", SEGV, overload="dim_IntList")
    relu = rec("relu", "float32", "contiguous", "crashed", "crash", SEGV, overload="default")
    relu2 = rec("relu", "float64", "sliced", "crashed", "crash", SEGV, overload="default")
    found = group_findings(
        [sited(summed, "sum.dim_IntList"), sited(relu, "sum.dim_IntList"), sited(relu2, "empty")]
    )
    assert sorted((f.count, f.title) for f in found) == [
        (1, "crash: segfault, in relu"),
        (2, "crash: segfault, inside sum.dim_IntList"),
    ], found


def test_a_crash_site_keys_the_same_in_every_view_of_a_run() -> None:
    """The versions grid and a foundation's root key read sites with the run's other records,
    as the findings do: add's case that segfaults inside sum (whose own cases crash too) is
    sum's finding there as well, not a second finding of add."""
    from packaging.version import Version

    from conformance.finding_keys import root_keys
    from conformance.report.version_grid import VersionGrid, version_findings

    add = sited(rec("add", "float32", "contiguous", "crashed", "crash", SEGV), "sum.dim_IntList")
    summed = rec("sum", "float32", "zero_size", "crashed", "crash", SEGV, overload="dim_IntList")
    summed = sited(summed, "sum.dim_IntList")
    v = Version("2.13.0")
    grid = VersionGrid([v], records={(add.id, v): add, (summed.id, v): summed})
    titles = [f.finding.title for f in version_findings(grid)]
    assert titles == ["crash: segfault, inside sum.dim_IntList"], titles
    blocked = rec("mul", "float32", "contiguous", "failed", "values", "x", overload="Tensor")
    blocked = replace(blocked, blocked_by="add.Tensor-float32-contiguous-native")
    root = root_keys([add, summed, blocked])
    assert [k.message for k in root.values()] == ["inside sum.dim_IntList"], root


def test_a_heap_corruption_is_not_named_for_the_op_that_noticed_it() -> None:
    """glibc notices a corrupted heap in whichever op allocates next: the site a replay died in
    is said in the record, never the finding's name (the culprit search names the cause)."""
    a = rec("masked_fill_", "float32", "sliced", "crashed", "crash", HEAP + "invalid pointer")
    b = rec("masked_fill_", "int64", "sliced", "crashed", "crash", HEAP + "invalid size")
    (finding,) = group_findings([sited(a, "empty.memory_format"), sited(b, "_copy_from")])
    assert "inside" not in finding.title and finding.key.crash == "heap corruption", finding
    # a sanitizer's report names the frame that did it: its signature keys it, not the site
    asan = rec("masked_fill_", "float32", "transposed", "crashed", "crash", ASAN)
    assert "inside" not in finding_key(sited(asan, "neg")).message


@pytest.mark.parametrize(
    "said",
    ["malloc_consolidate(): unaligned fastbin chunk detected", "_int_free(): invalid size"],
)
def test_every_glibc_malloc_check_is_a_heap_corruption(said: str) -> None:
    """glibc aborts with these words when its checks find the heap damaged: a plain "abort"
    would be keyed by the op it died in, which only noticed the damage."""
    assert crash_class(f"killed by SIGABRT: {said}") == "heap corruption"


def test_a_collective_crash_site_is_read_past_its_kind() -> None:
    """Collectives keys carry their kind first ("[async] inside neg"): the site is still seen."""
    from conformance.findings import Finding, FindingKey, _site

    key = FindingKey("crash", "[async] inside neg", "abort", "", "neg")
    assert _site(Finding(key)) == "neg"
    assert _site(Finding(key._replace(message="[async] "))) == ""
