"""A verdict that survives a crashing backend (issue 19): every collected case gets exactly one
record with or without pytest-xdist, the suite's own diagnostics never change a case's verdict,
a crash is blamed on the case that corrupted memory, and crash findings are root causes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.findings import group_findings
from conformance.record import CaseRecord

BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
# neg corrupts the process, relu crashes when it runs after neg (tests/backends); the cases
# run in that order (registered overloads in name order), in one worker under xdist
CORRUPTING = (
    *("--backend", "corrupting_backend", "--ops", "neg,relu", "--dtypes", "float32"),
    *("--layouts", "contiguous", "--paths", "native", "--values", "ordinary"),
)
XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])


def _accounted(run) -> None:
    """collected = recorded: one record per collected case, said at the end of the run."""
    ids = [r["id"] for r in run.results]
    assert len(ids) == len(set(ids)), "a case has two records"
    counts = run.info["accounting"]
    assert counts["collected"] == counts["recorded"] == len(ids), counts
    assert f"{counts['collected']} collected = {counts['recorded']} recorded" in run.output


@pytest.mark.slow
@XDIST
def test_many_crashing_cases_are_all_recorded(run_suite, xdist):
    """float64 copies crash: more than 20 crashing cases, no worker lost, every case recorded,
    and the crashes are one finding, named after the foundation they share."""
    run = run_suite(
        "--ops",
        "_copy_from,abs*,neg*,add.Tensor",
        "--dtypes",
        "float32,float64",
        "--values",
        "ordinary",
        "--heap-zones",
        "off",  # the suite's heap red zones would catch the double free: crashes are tested
        *xdist,
        env={"ECHO_NPU_FAULTS": "float64_copy_crash"},
        timeout=600,
    )
    _accounted(run)
    crashed = [r for r in run.results if r["status"] == "crashed"]
    assert len(crashed) > 20
    # float64 cases, and _copy_from's float32 cases that convert to float64
    assert all(r["dtype"] == "float64" or r["op"] == "_copy_from" for r in crashed)
    assert all("heap corruption" == r["crash_class"] for r in crashed)
    assert all("double free" in r["message"] for r in crashed)  # glibc's words are kept
    others = [r for r in run.results if r["dtype"] == "float32" and r["op"] != "_copy_from"]
    assert {r["status"] for r in others} <= {"passed", "skipped"}
    findings = run.info["findings"]
    assert len(findings) == 1, [f["title"] for f in findings]
    assert findings[0]["title"].startswith("crash: heap corruption, in _copy_from")
    assert run.returncode == 1


HEAP_DAMAGE = {"PYTHONPATH": BACKENDS, "CORRUPTING_BACKEND_DAMAGE": "heap"}


@XDIST
def test_a_crash_detected_later_is_blamed_on_the_case_that_corrupted_memory(run_suite, xdist):
    """neg passes its own checks but corrupts glibc's heap; relu crashes after it. The culprit
    search replays the runner's earlier cases, names neg and confirms it: neg alone, then a
    heap exercise, crashes."""
    one_worker = ["--dist", "loadfile"] if xdist else []
    run = run_suite(*CORRUPTING, *xdist, *one_worker, env=HEAP_DAMAGE)
    _accounted(run)
    statuses = {r["op"]: r["status"] for r in run.results}
    relu = run.case("relu-float32-contiguous-native")
    # the whole record, the run's header (isolation, device probe) and its tail: a CI run once
    # saw relu pass (not reproduced here)
    seen = (statuses, relu, run.output[:2500], run.output[-3000:])
    assert statuses == {"neg": "passed", "relu": "crashed"}, seen
    assert relu["culprit"] == "neg-float32-contiguous-native", relu
    assert relu["message"].startswith(
        "[crash] memory corrupted by neg-float32-contiguous-native (its own checks passed), "
        "detected in relu-float32-contiguous-native"
    )
    assert "confirmed: it alone, then a heap exercise, crashes" in relu["culprit_search"]
    (finding,) = run.info["findings"]
    assert finding["culprit"] == "neg"
    assert "memory corrupted by neg" in finding["title"]


@pytest.mark.parametrize(
    ("backend", "env", "first", "crashed"),
    [
        ("corrupting_backend", {"PYTHONPATH": BACKENDS}, "neg", "relu"),
        ("echo_npu", {"ECHO_NPU_FAULTS": "neg_aborts_after_abs"}, "abs", "neg"),
    ],
    ids=["flag", "echo-fault"],
)
def test_a_crash_after_a_case_that_corrupts_nothing_is_not_blamed_on_it(
    run_suite, tmp_path, backend, env, first, crashed
):
    """Issue 32: a correct op that aborts only when another ran earlier in the process (state
    the first leaves, no corruption) was reported "memory corrupted by" the first, and the
    baseline skipped the innocent case. Now: "crashes only after", the crash is the crashed
    case's own, and the baseline's entry is on it."""
    args = ["--backend", backend, "--ops", f"{first},{crashed}", "--dtypes", "float32"]
    args += ["--layouts", "contiguous", "--paths", "native", "--values", "ordinary"]
    run = run_suite(*args, env=env)
    _accounted(run)
    row = run.case(f"{crashed}-float32-contiguous-native")
    assert row["status"] == "crashed" and "culprit" not in row, row
    assert row["crashes_after"] == f"{first}-float32-contiguous-native"
    assert row["message"].startswith(
        f"[crash] crashes only after {first}-float32-contiguous-native ran in this process"
    )
    assert "not confirmed" in row["culprit_search"]
    assert run.case(f"{first}-float32-contiguous-native")["status"] == "passed"
    # the op it died inside, from a replay of both under an op trace (harness/crash_site.py)
    assert row["crash_site"] == crashed, row
    (finding,) = run.info["findings"]
    assert finding["ops"] == [crashed], finding
    # the op it died in is its own, whose own case crashed that way: the finding says both
    title = f"crash: {row['crash_class']}, inside {crashed}, only after {first} ran in the process"
    assert finding["title"] == title, finding
    from conformance.harness.baseline import baseline

    records = [CaseRecord.from_json(r) for r in run.results]
    written = baseline([(run.info, records)], source="test").files[""]
    assert f'"{crashed}-float32-contiguous-native"' in written or (
        f"{crashed}-float32-contiguous-native" in written and f"{first}-float32" not in written
    )


@XDIST
def test_a_crash_that_does_not_reproduce_is_not_the_cases(run_suite, tmp_path, xdist):
    """Issue 45: relu aborts once, after neg ran in its runner, and never again. The case is run
    again alone in a fresh runner before its crash is recorded; it passes there, the replay of
    its runner's cases does not crash either: its record is that run's verdict, with a note of
    the crash it did not cause."""
    one_worker = ["--dist", "loadfile"] if xdist else []
    env = {
        "PYTHONPATH": BACKENDS,
        "CORRUPTING_BACKEND_DAMAGE": "once",
        "CORRUPTING_BACKEND_MARKER": str(tmp_path / "aborted"),
    }
    run = run_suite(*CORRUPTING, *xdist, *one_worker, env=env)
    _accounted(run)
    assert (tmp_path / "aborted").exists()  # it did crash once
    relu = run.case("relu-float32-contiguous-native")
    assert relu["status"] == "passed", relu
    (note,) = relu["notes"]
    assert "killed by SIGABRT after 1 other case(s) ran in it" in note, note
    assert "not reproduced" in note and "not charged to this case" in note
    assert relu["message"] == f"[note] {note}"
    assert run.returncode == 0 and not run.info["findings"]


def test_culprit_search_can_be_switched_off(run_suite):
    run = run_suite(*CORRUPTING, "--culprit-search", "0", env={"PYTHONPATH": BACKENDS})
    (crashed,) = [r for r in run.results if r["status"] == "crashed"]
    assert "culprit" not in crashed
    assert "--culprit-search 0 used up" in crashed["culprit_search"]


@XDIST
def test_a_crashing_foundation_probe_leaves_the_failing_case_its_own_verdict(run_suite, xdist):
    """relu turns NaN into 0 (a values failure); blame probes the float32 foundations, whose
    resize_ probe segfaults: in its own process, so relu's case stays `failed` on its own
    values, and the probe's crash is the resize_ foundation's."""
    run = run_suite(
        "--ops",
        "relu,resize_",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous",
        *xdist,
        env={"ECHO_NPU_FAULTS": "nan_to_zero,resize_segfault"},
    )
    _accounted(run)
    relu = run.case("relu-float32-contiguous-native-special")
    assert relu["status"] == "failed", relu
    assert relu["check"] == "values"
    assert "blocked_by" not in relu or relu["blocked_by"] is None
    resize = run.case("resize_-float32-contiguous-native")
    assert resize["status"] == "crashed" and resize["crash_class"] == "segfault"
    titles = [f["title"] for f in run.info["findings"]]
    assert len(titles) == 2, titles
    assert any(t.startswith("crash: segfault, inside resize_") for t in titles), titles
    assert any(t.startswith("values:") for t in titles), titles


def test_cases_not_run_are_recorded_and_fail_the_run(run_suite):
    """-x stops the run at the first failure: every later case is `not-run`, with the reason."""
    run = run_suite(
        "--ops",
        "add_.Tensor,neg",
        "--dtypes",
        "float32",
        "--values",
        "ordinary",
        "-x",
        env={"ECHO_NPU_FAULTS": "inplace_returns_new"},
    )
    _accounted(run)
    not_run = [r for r in run.results if r["status"] == "not-run"]
    assert [r["status"] for r in run.results].count("failed") == 1
    assert not_run
    assert all("the run stopped early" in r["message"] for r in not_run)
    assert run.returncode != 0


@XDIST
def test_the_first_failure_names_the_faulty_op_not_a_scenario(run_suite, xdist):
    """Op cases run before the end-to-end scenarios: with -x the first failure is masked_fill_
    (whose fault also breaks the attention-mask scenarios). A few op cases besides it, not all,
    and every scenario (-k; --ops would leave the scenarios out)."""
    keep = "abs-float32 or masked_fill or scenarios"
    env = {"ECHO_NPU_FAULTS": "masked_fill_overflow", "ECHO_NPU_ALLOCATOR": "guard"}
    run = run_suite("-x", "-k", keep, *xdist, env=env)
    assert any(r["path"] == "scenario" for r in run.results), "no scenario was collected"
    first = [r for r in run.results if r["status"] in ("failed", "crashed", "blocked")]
    assert first, run.output[-3000:]
    assert first[0]["op"] == "masked_fill_", first[0]["id"]
    assert not any(r["path"] == "scenario" and r["status"] == "failed" for r in run.results)


def test_crash_findings_are_keyed_by_class_and_culprit_not_glibc_words():
    words = [
        "free(): invalid pointer",
        "double free or corruption (out)",
        "corrupted size vs. prev_size",
        "malloc(): unaligned tcache chunk detected",
    ]
    records = [
        {
            "id": f"test_matches_cpu[{op}-float64-contiguous-native]",
            "status": "crashed",
            "check": "crash",
            "op": op,
            "dtype": "float64",
            "layout": "contiguous",
            "path": "native",
            "message": f"[crash] the process killed by SIGABRT while running this case: {w}",
        }
        for op, w in zip(["abs", "neg", "exp", "mul"], words, strict=True)
    ]
    passing = [
        dict(r, id=r["id"].replace("float64", d), dtype=d, status="passed", message=None)
        for r in records
        for d in ("float32", "int64")
    ]
    (finding,) = group_findings(CaseRecord.from_json(r) for r in records + passing)
    assert finding.key.crash == "heap corruption"
    assert finding.count == 4
    assert finding.factor == "all 4 case(s) are dtype float64; the same ops pass in 2 other dtypes"
    later = dict(records[0], culprit="neg-float32-contiguous-native")
    (named,) = group_findings([CaseRecord.from_json(later)])
    assert named.key.culprit == "neg" and "memory corrupted by neg" in named.title


def test_a_foundation_that_fails_two_ways_is_two_findings():
    def blocked(op: str, probe: str) -> CaseRecord:
        data = {
            "id": f"test_matches_cpu[{op}-float32-contiguous-native]",
            "status": "blocked",
            "check": "values",
            "op": op,
            "dtype": "float32",
            "layout": "contiguous",
            "path": "native",
            "message": "[blocked] ...",
            "blocked_by": "_copy_from-float32-offset-native",
            "blocked_by_message": f"some copy: {probe}",
            "blocked_by_probe": probe,
        }
        return CaseRecord.from_json(data)

    wrong = (
        "device->host float32->float64: 3/120 elements wrong, first at flat index 4: 1 instead of 2"
    )
    raises = "raised RuntimeError: non-contiguous source"
    findings = group_findings(
        [blocked("abs", wrong), blocked("neg", wrong), blocked("exp", raises)]
    )
    assert sorted(f.count for f in findings) == [1, 2]


def test_a_crash_inside_an_op_another_calls_is_named_for_that_op(run_suite):
    """nn.L1Loss's backward runs abs, then neg on the autograd engine's thread, where neg
    aborts (no Python frame; L1Loss's own ops are right): a replay under an op trace finds the
    op it died inside, and the finding is neg's, not L1Loss's (harness/crash_site.py)."""
    run = run_suite(
        "-k", "nn.L1Loss-float32-train-contiguous", env={"ECHO_NPU_FAULTS": "neg_aborts_after_abs"}
    )
    _accounted(run)
    crashed = [r for r in run.results if r["status"] == "crashed"]
    assert crashed and all(r["op"] == "module" for r in crashed), run.output[-3000:]
    assert {r["crash_class"] for r in crashed} == {"abort"}
    traced = [r for r in crashed if r.get("crash_site")]
    assert traced and {r["crash_site"] for r in traced} == {"neg"}, crashed
    assert ", inside neg (where a replay under an op trace died)" in traced[0]["message"]
    (finding,) = run.info["findings"]
    assert finding["title"] == "crash: abort, inside neg" and finding["culprit"] == "neg"
    assert finding["count"] == len(crashed)
