"""The modelled upstream tests (conformance/upstream/models.py) held to PyTorch: each row's dtypes
against what torch's own `@ops` decorator instantiates for the PyTorch-style tests written from
the rows (a child pytest collects them on echo_npu), and the op lists against what PyTorch's test
files declare of known OpInfos."""

from __future__ import annotations

import re

import pytest

from conformance.errors import ConformanceUsageError
from conformance.upstream.models import MODELS, dtypes_of, model, op_list
from tests.helpers import REPO, run_pytest

FOLDER = REPO / "tests/upstream/pytorch"
#: OpInfos of every op list, several dtype sets (bool, complex32, integers only, float only)
OPS = "exp,nn.functional.relu,where,abs,tril,index_select,mm,eq,amax,sum,mul,add,masked_fill"


@pytest.fixture(scope="module")
def instantiated() -> set[str]:
    """The test names torch's `@ops` made of the PyTorch-style modules for OPS."""
    run = run_pytest(
        str(FOLDER), "--collect-only", "-p", "no:cacheprovider", "-p", "bypass_only",
        "-o", "python_files=pytorch_test_*.py",
        env={"UPSTREAM_OPS": OPS, "PYTHONPATH": str(FOLDER)}, timeout=600,
    )  # fmt: skip
    names = set(re.findall(r"::(test_\w+)$", run.stdout, re.M))
    assert names, run.stdout[-3000:] + run.stderr[-2000:]
    return names


def test_each_row_runs_the_ops_and_dtypes_torch_instantiates(instantiated: set[str]) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = OPS.split(",")
    expected = set()
    for row in MODELS:
        for op in op_db:
            if op.full_name in wanted and op.full_name in op_list(row.ops):
                dtypes = dtypes_of(row, op) + list(row.skipped_dtypes)  # the body skips these
                expected |= {
                    f"{row.test}_{op.formatted_name}_npu_{d}"
                    for d in dtypes
                    if d in {str(t).removeprefix("torch.") for t in op.dtypes}
                }
    assert instantiated == expected, (
        f"instantiated, not modelled: {sorted(instantiated - expected)[:10]}; "
        f"modelled, not instantiated: {sorted(expected - instantiated)[:10]}"
    )


@pytest.mark.parametrize(
    ("op", "rule", "held"),
    [  # as PyTorch's test files declare them (test_ops.py, test_*_ufuncs.py, test_reductions.py)
        ("mm", "no_numpy_ref", True),
        ("mul", "no_numpy_ref", True),  # mul has no numpy reference: compare_cpu's only
        ("tril", "no_numpy_ref", True),
        ("nn.functional.relu", "no_numpy_ref", False),
        ("nn.functional.relu", "unary_ufuncs_with_ref", True),
        ("where", "ref_test_ops", True),
        ("clamp", "ref_test_ops", True),
        ("exp", "ref_test_ops", False),  # a ufunc: test_unary_ufuncs judges it
        ("add", "binary_ufuncs_with_ref", True),
        ("mul", "binary_ufuncs_with_ref", False),
        ("sum", "reductions_with_ref", True),
    ],
)
def test_op_lists_hold_what_pytorch_declares(op: str, rule: str, held: bool) -> None:
    assert (op in op_list(rule)) is held


def test_compare_cpu_runs_one_dtype_and_names_its_gate() -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    row = model("TestCommon.test_compare_cpu")
    (mm,) = [op for op in op_db if op.full_name == "mm"]
    assert dtypes_of(row, mm) == ["float32"]
    assert row.needs_bypass and row.tolerance_for("float32") == (1e-3, 1e-3)
    assert row.tolerance_for("int64") == (0.0, 0.0)
    with pytest.raises(ConformanceUsageError, match="not a modelled upstream test"):
        model("TestCommon.test_no_such_test")
