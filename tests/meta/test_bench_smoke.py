"""The bench runs (issue 61): `bench/bench_conformance.py --smoke` times one round of the harness
against a hand-written comparison and phase by phase, wrapping the functions of the per-case
path by name, so a renamed or removed function fails here, not unseen in the next bench run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]


def _process_cost() -> ModuleType:
    """bench/process_cost.py, the module the bench splits a run's CPU with."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import process_cost
    finally:
        sys.path.pop(0)
    return process_cost


def test_the_bench_runs_its_smoke_configuration_to_the_end():
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_conformance.py"), "--smoke"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "harness overhead, add.Tensor float32" in out and "target <= 1.5x" in out, out
    assert "the op on CPU and device (invoke)" in out, out  # the phase timer wrapped it


def test_the_cpu_split_names_the_processes_of_an_xdist_run_and_reads_its_records():
    """bench/process_cost.py on the xdist path the bench measures beside the main job (`-n 2`): the
    workers, their runner zygotes and the runners are told apart, each with CPU seconds, and
    every record's status is read back (the verdicts compared case by case)."""
    process_cost = _process_cost()
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly", "-n", "2",
           "-k", "masked_fill_.Scalar and float32"]  # fmt: skip
    run = process_cost.measured_run(cmd, str(REPO), clean_env())
    assert run.cases >= 20 and set(run.statuses.values()) <= {"passed", "skipped"}, run.summary
    kinds = {kind: cpu for kind, (_, cpu) in run.split.items()}
    for kind in (process_cost.ROOT, "xdist workers", "runner zygotes",
                 "runners (the cases)"):  # fmt: skip
        assert kinds.get(kind, 0) > 0, run.split
    assert run.case_time["ops (ordinary)"][0] >= 1 and run.case_time["ops (ordinary)"][1] > 0
    changed = dict(run.statuses)
    case = next(iter(changed))
    changed[case] = "failed"
    older = process_cost.MeasuredRun(1, 1, len(changed), "", {}, changed)
    text = process_cost.compare_verdicts(older, run)
    assert f"{len(run.statuses)} cases in both runs, 1 changed status" in text, text
    assert f"{case}: failed -> {run.statuses[case]}" in text, text


def test_the_cpu_split_of_a_run_without_xdist_tells_the_zygote_from_the_runners():
    """Without xdist the pytest process forks the runner zygote itself, whose forked runners
    keep its command line: the cases' CPU is the runners' (bench_conformance.py splits the
    `-k masked_fill` run so), not "runners' own children" (the probes and ranks they spawn)."""
    process_cost = _process_cost()
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly", "-p",
           "no:xdist", "-k", "masked_fill_.Scalar and float32"]  # fmt: skip
    run = process_cost.measured_run(cmd, str(REPO), clean_env())
    assert run.cases >= 20 and set(run.statuses.values()) <= {"passed", "skipped"}, run.summary
    kinds = {kind: cpu for kind, (_, cpu) in run.split.items()}
    assert "runner zygotes" in kinds, run.split
    assert kinds["runners (the cases)"] > kinds.get("runners' own children", 0.0), run.split


def test_a_run_s_torch_warning_lines_are_counted_and_the_suite_s_summary_is_not():
    """The fresh-checkout figure counts the torch warnings a run printed to the terminal (issue
    85: none between pytest's progress and its summary): a real one of torch's is found, and
    the suite's own one-line summary of the warnings it kept in the records is not one."""
    process_cost = _process_cost()
    warns = "import torch\ntorch.add(torch.ones(2), torch.ones(2), out=torch.empty(3))"
    run = process_cost.measured_run([sys.executable, "-c", warns], str(REPO), clean_env())
    assert len(run.warning_lines) == 1 and "resized" in run.warning_lines[0], run.warning_lines
    summary = (
        "conformance: warnings: 138 case(s) warned, 19 distinct warning(s) kept in their records "
        "(`warnings`), not printed; most often (360x): An output with one or more elements was"
    )
    assert not process_cost.WARNING_LINE.search(summary)
    for printed in (
        "[W1204 05:07:22.123456 1234 aten/src/ATen/native/Resize.cpp:30] Warning: An output",
        "[rank0]:W1204 05:07:22.123000 1234 torch/_dynamo/convert_frame.py:824] [0/8] recompile",
    ):  # a C++ TORCH_WARN, torch._logging's (Dynamo's, Inductor's)
        assert process_cost.WARNING_LINE.search(printed), printed
