"""Crash diagnosis from a forked child's output (harness/isolation.py)."""

from conformance.harness.isolation import describe_status, diagnose

ASAN = """noise
=================================================================
==123==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602 at pc 0x7f bp 0x7f
WRITE of size 4 at 0x602 thread T0
    #0 0x7f in masked_fill_kernel kernels.cpp:42
    #1 0x7f in enpu::masked_fill_ elementwise.cpp:120
SUMMARY: AddressSanitizer: heap-buffer-overflow kernels.cpp:42 in masked_fill_kernel
==123==ABORTING
"""


def test_asan_report_becomes_headline_and_detail():
    headline, detail = diagnose(ASAN)
    assert headline.startswith("AddressSanitizer: heap-buffer-overflow on address 0x602")
    assert detail.splitlines()[0].endswith(headline) and "#1 0x7f in enpu::masked_fill_" in detail
    assert detail.splitlines()[-1].startswith("SUMMARY:")


def test_glibc_message_without_newline_before_faulthandler():
    headline, _ = diagnose("x\nfree(): invalid pointerFatal Python error: Aborted\n\nStack")
    assert headline == "free(): invalid pointer"


def test_plain_crash_has_no_headline_but_a_tail():
    headline, detail = diagnose("\n".join(f"line {i}" for i in range(100)))
    assert headline is None and detail.splitlines()[-1] == "line 99"
    assert len(detail.splitlines()) == 40


def test_describe_status():
    assert describe_status(11) == "killed by SIGSEGV"
    assert describe_status(1 << 8) == "exited with code 1"


def test_the_case_file_names_each_op_case_once() -> None:
    """What a spawned runner or zygote collects (runners.write_case_file): the owner's op cases,
    each once (pytest renames repeated parameter ids, and a renamed item is one the spawned
    process 'did not collect')."""
    import json
    import os
    from types import SimpleNamespace

    from conformance.harness.nodes import CASE_PARAM
    from conformance.harness.runners import write_case_file
    from conformance.record import CaseId

    case = CaseId("abs", "float32", "contiguous", "native")
    item = SimpleNamespace(callspec=SimpleNamespace(params={CASE_PARAM: case}))
    scenario = SimpleNamespace(callspec=None)
    path = write_case_file([item, scenario, item])
    try:
        with open(path) as f:
            assert json.load(f) == [str(case)]
    finally:
        os.unlink(path)
