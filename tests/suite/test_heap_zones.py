"""Issue 48: heap corruption is caught on any backend's allocator, in the op that did it.

tests/backends/plain_npu is a backend nobody here wrote in the sense that matters: its device
memory is plain malloc/free in its own shared object, and it offers none of the suite's hooks.
Its `relu` writes 64 bytes past the end of its output (when the element count is a multiple of
7), its `abs` writes into a scratch block it just freed. With the suite's heap red zones
(engine/heap.py, on by default) each fails its own op's cases as `memory`, serially with -x and
with -n 2; without them the same faults crash somewhere or pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
PLAIN = ("--backend", "plain_npu", "--device", "plain", "--layouts", "contiguous")
ENV = {"PYTHONPATH": BACKENDS}
# fault: (the op it is planted in, what the memory failure says)
FAULTS = {
    "relu_writes_past": ("relu", "byte(s) written past the end of a heap block"),
    "abs_uses_freed": ("abs", "byte(s) written into a freed heap block"),
}


def test_plain_npu_is_watched_and_passes_without_faults(run_suite):
    run = run_suite(*PLAIN, "--ops", "relu,abs", env=ENV)
    assert run.returncode == 0 and not run.failed(), run.output
    header = " ".join(run.info["header"])
    assert "heap red zones: the device's memory is allocated through the watched" in header
    assert "allocation imports rewritten in plain_npu_" in header


def test_both_faults_fail_their_own_op_with_n_2(run_suite):
    env = {**ENV, "PLAIN_NPU_FAULTS": ",".join(FAULTS)}
    run = run_suite(*PLAIN, "--ops", "relu,abs", "--dtypes", "float32,int32", "-n", "2", env=env)
    failed = run.failed()
    for op, text in FAULTS.values():
        mine = [r for r in failed if r["op"] == op]
        assert mine and all(r["check"] == "memory" and text in r["message"] for r in mine), mine
        assert all(f"in {op} (its own call" in r["message"] for r in mine if op == "abs")
    assert {r["op"] for r in failed} == {"relu", "abs"}
    # relu's overflow only where the element count is a multiple of 7 (the -sizes case: 7)
    assert run.case("relu-float32-contiguous-native-sizes")["status"] == "failed"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_first_failure_of_a_serial_x_run_is_the_fault_s_own_op(run_suite, fault):
    op, text = FAULTS[fault]
    env = {**ENV, "PLAIN_NPU_FAULTS": fault}
    run = run_suite(*PLAIN, "--ops", "relu,abs", "--dtypes", "float32", "-x", env=env)
    failed = run.failed()
    assert len(failed) == 1, [r["id"] for r in failed]
    assert failed[0]["op"] == op and failed[0]["check"] == "memory", failed[0]
    assert text in failed[0]["message"] and "plain_npu_" in failed[0]["message"]


def test_without_the_layer_the_overflow_is_not_named(run_suite):
    """--heap-zones off: the write past the end is nobody's memory failure (glibc may crash on
    it, somewhere, or not at all): the layer is what names it."""
    env = {**ENV, "PLAIN_NPU_FAULTS": "relu_writes_past"}
    args = ("--ops", "relu", "--dtypes", "float32", "--values", "sizes", "--heap-zones", "off")
    run = run_suite(*PLAIN, *args, env=env)
    assert not [r for r in run.results if r.get("check") == "memory"], run.output
    assert "heap red zones: not watched (off (--heap-zones off))" in " ".join(run.info["header"])


def test_echo_npu_s_overflow_is_caught_in_malloc_mode_too(run_suite):
    """echo_npu's own red zones live in its guard allocator only; its neg that writes 32 bytes
    past its output now fails neg's cases in the default (malloc) mode as well."""
    args = ("--ops", "neg", "--dtypes", "float32", "--layouts", "contiguous", "--paths", "native")
    run = run_suite(*args, env={"ECHO_NPU_FAULTS": "neg_writes_past"})
    row = run.case("neg-float32-contiguous-native")
    assert row["status"] == "failed" and row["check"] == "memory", row
    assert "32 byte(s) written past the end of a heap block" in row["message"]
