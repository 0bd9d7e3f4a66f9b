"""The tolerance-measuring tool (conformance/measure/tolerances.py, its figures and report in
tolerance_figures.py): figures, report, usage errors, a crashing CPU kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conformance.engine.compare import TOLERANCES
from conformance.measure import tolerances as tool
from conformance.measure.tolerance_figures import measure
from tests.helpers import clean_env

BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("samples"))


def test_measure_gives_the_multiplier_of_the_base_tolerance():
    e = torch.tensor([1.0, 100.0], dtype=BF16)
    figures = measure(e * 1.2, e, TOLERANCES[BF16])
    assert figures.max_rel == pytest.approx(0.2, rel=0.02)
    assert figures.x == pytest.approx(0.2 * 100 / (1e-5 + 1.6e-2 * 100), rel=0.02)
    assert figures.over == pytest.approx(figures.x)
    assert measure(e, e, TOLERANCES[BF16]).x == 0


def test_tool_reports_each_dtype_and_what_the_spec_allows(capsys, cache):
    code = tool.main(
        ["--ops", "convolution_overrideable", "--dtypes", "float32,bfloat16"]
        + ["--layouts", "contiguous,transposed", "--cache-dir", cache]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "convolution_overrideable: tol_scale" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("float32"))
    assert row.rstrip().endswith("x1")  # measured: the base holds (no "!")
    assert "bfloat16" not in out.split("tol_scale", 1)[1]  # the spec allows float32/float64 only


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ops", "no_such_op*"], "--ops: no_such_op* matches no aten overload"),
        (["--ops", "addbmm", "--dtypes", "float33"], "--dtypes: unknown dtype 'float33'"),
        (["--ops", "addbmm", "--layouts", "diagonal"], "--layouts: unknown layout(s) diagonal"),
    ],
)
def test_tool_usage_errors_are_one_line(capsys, argv, message):
    assert tool.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


CRASH = """
import os, signal
from conformance.measure import tolerances as tool
from tests.helpers import clean_env

def crash(progress):
    progress("zero_size some_op(float32[0])")
    os.kill(os.getpid(), signal.SIGFPE)

print(tool.in_child(crash))
print(tool.in_child(lambda progress: {"a": 1}))
"""


def test_a_crashing_cpu_kernel_costs_one_layout():
    """In the tool's own process (one thread: it may fork, processes/forking.py)."""
    proc = subprocess.run(
        [sys.executable, "-c", CRASH], capture_output=True, text=True, timeout=120,
        env=clean_env(),
    )  # fmt: skip
    assert proc.stdout.splitlines() == [
        "CPU crashed (SIGFPE) at zero_size some_op(float32[0]): left out",
        "{'a': 1}",
    ], proc.stderr[-2000:]
