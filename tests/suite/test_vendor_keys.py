"""Kernels a vendor registers at every key (issue 80): a backend with `dropout` and `lstm` at
AutogradPrivateUse1 (tests/backends/autograd_npu.py, as torch_npu registers them) shows them in
the header and as op cases, and each planted fault fails in the op family; an autocast `exp`
wrong only on the lower-precision inputs its policy casts (tests/backends/autocast_npu.py)
fails its autocast case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_pytest

REPO = Path(__file__).resolve().parents[2]
BACKENDS = str(REPO / "tests" / "backends")
AUTOGRAD = ("--backend", "autograd_npu", "--ops", "dropout,lstm.input")


def _run(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[str, list[dict]]:
    results = tmp_path / f"results-{len(list(tmp_path.iterdir()))}"
    proc = run_pytest(
        *args, "-p", "no:cacheprovider", "--results", str(results),
        env={"PYTHONPATH": BACKENDS, **env}, timeout=600,
    )  # fmt: skip
    rows = [
        json.loads(line)
        for f in sorted(results.glob("cases-*.jsonl"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]
    return proc.stdout + proc.stderr, rows


def _failed(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "failed"]


def test_kernels_at_the_autograd_key_are_op_cases(tmp_path: Path) -> None:
    out, rows = _run(tmp_path, "conformance/test_conformance.py", *AUTOGRAD, env={})
    assert "at AutogradPrivateUse1" in out, out[-3000:]
    ops = {r["op"] for r in rows}
    assert {"dropout", "lstm"} <= ops
    assert any(r["id"].endswith("-grad]") and r["op"] == "lstm" for r in rows)
    assert not _failed(rows), _failed(rows)[:2]


@pytest.mark.parametrize(
    ("fault", "op", "words"),
    [
        ("dropout_unscaled", "dropout", "random draws"),
        ("dropout_keeps_more", "dropout", "values kept"),
        ("dropout_backward", "dropout", "the gradient is not the incoming gradient masked"),
        ("lstm_swapped_gates", "lstm", "elements differ"),
    ],
)
def test_a_wrong_kernel_at_the_autograd_key_fails_its_op_case(
    tmp_path: Path, fault: str, op: str, words: str
) -> None:
    _, rows = _run(
        tmp_path, "conformance/test_conformance.py", *AUTOGRAD,
        env={"AUTOGRAD_NPU_FAULTS": fault},
    )  # fmt: skip
    failed = _failed(rows)
    assert failed and {r["op"] for r in failed} == {op}, failed[:2]
    assert any(words in r["message"] for r in failed), [r["message"] for r in failed][:3]


@pytest.mark.parametrize("fault", ["", "exp_zeros_for_half", "exp_in_half"])
def test_an_autocast_kernel_wrong_on_lower_inputs_fails(tmp_path: Path, fault: str) -> None:
    _, rows = _run(
        tmp_path, "conformance/autocast", "--backend", "autocast_npu", "-k", "exp",
        env={"AUTOCAST_NPU_FAULTS": fault},
    )  # fmt: skip
    exp = next(r for r in rows if r["id"] == "test_autocast_policy[exp]")
    if not fault:
        assert exp["status"] == "passed", exp["message"]
        assert "on float16 inputs against CPU on the inputs cast" in exp["values"]
        return
    assert exp["status"] == "failed"
    assert exp["message"].startswith("[autocast values] exp: on float16 inputs"), exp["message"]
    assert not [r for r in _failed(rows) if r is not exp]


def _findings(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.startswith("  ") and ". " in line[:6]]


@pytest.mark.parametrize(
    ("backend", "env", "selection", "named"),
    [
        # every BatchNorm and InstanceNorm training case, full selection: one finding
        ("echo_npu", {"ECHO_NPU_FAULTS": "bn_running_var_biased"}, "BatchNorm or InstanceNorm",
         "aten.native_batch_norm.default: running_var after the call"),
        # a norm off by less than 8x its base tolerance: named by its op case's tolerance
        ("autograd_npu", {"AUTOGRAD_NPU_FAULTS": "group_norm_ignores_eps"}, "GroupNorm",
         "aten.native_group_norm.default: output"),
        # a kernel at the autograd key, none of whose parts is wrong
        ("autograd_npu", {"AUTOGRAD_NPU_FAULTS": "lstm_swapped_gates"}, "LSTM",
         "lstm (its kernel at the autograd key): output"),
    ],
)  # fmt: skip
def test_one_broken_kernel_is_one_module_finding_naming_it(
    tmp_path: Path, backend: str, env: dict[str, str], selection: str, named: str
) -> None:
    """Every failed module case is searched (no per-process cap that splits a finding), each op
    at its op case's tolerance, the autograd key's kernels too (issue 80)."""
    out, rows = _run(
        tmp_path, "conformance/modules", "--backend", backend, "-k", selection, "-n", "2",
        env=env,
    )  # fmt: skip
    failed = _failed(rows)
    assert len(failed) > 16, len(failed)  # more than a capped search would have named
    assert all(r["message"].startswith(f"[module] {named}") for r in failed), failed[0]["message"]
    assert len(_findings(out)) == 1, _findings(out)


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("", ""),
        ("dropout_unscaled", "values are neither dropped nor the input kept and scaled"),
        ("dropout_backward", "values are not the grad_output masked and scaled"),
    ],
)
def test_a_dropout_module_in_training_is_judged_by_its_law(
    tmp_path: Path, fault: str, words: str
) -> None:
    """nn.Dropout (a suite module spec: module_db has none) in training: its values by dropout's
    law, never by dtype and shape alone (engine/modules/laws.py)."""
    _, rows = _run(
        tmp_path, "conformance/modules", "--backend", "autograd_npu", "-k", "nn.Dropout-",
        env={"AUTOGRAD_NPU_FAULTS": fault},
    )  # fmt: skip
    train = [r for r in rows if "-train-" in r["id"]]
    assert len(train) == 8
    if not fault:
        assert all(r["status"] == "passed" for r in rows)
        assert all("judged by dropout's law" in str(r.get("notes")) for r in train)
        return
    failed = _failed(rows)
    assert failed and all("-train-" in r["id"] for r in failed)
    assert all(words in r["message"] for r in failed), failed[0]["message"]


@pytest.mark.parametrize(
    ("backend", "fault", "status", "words"),
    [
        ("echo_npu", "", "passed", "not observable: the device declares no dtypes"),
        ("declaring_npu", "", "passed", ""),
        ("declaring_npu", "claims_int4", "passed", ""),  # no kernel anywhere: not judged
        ("declaring_npu", "omits_bfloat16", "failed", "handled but not declared: bfloat16"),
    ],
)
def test_what_the_device_declares_of_its_dtypes_agrees_with_what_it_does(
    tmp_path: Path, backend: str, fault: str, status: str, words: str
) -> None:
    _, rows = _run(
        tmp_path, "conformance/contract", "--backend", backend, "-k", "declared",
        env={"DECLARING_NPU_FAULT": fault},
    )  # fmt: skip
    (row,) = rows
    assert row["status"] == status, row["message"]
    assert words in (row["message"] or ""), row["message"]


@pytest.mark.parametrize("fault", ["", "1"])
def test_reference_inputs_judge_the_arguments_sample_inputs_never_use(
    tmp_path: Path, fault: str
) -> None:
    """OpInfo's ordinary reference inputs are a value set of their own (-reference, issue 80):
    an add that rounds a fractional alpha passes every other case (sample_inputs use alpha 1
    and 2) and fails the -reference cases (alpha=-3.125)."""
    _, rows = _run(
        tmp_path, "conformance/test_conformance.py", "--backend", "alpha_npu",
        "--ops", "add.Tensor", "--paths", "native", env={"ALPHA_NPU_ROUNDS": fault},
    )  # fmt: skip
    reference = [r for r in rows if r["id"].endswith("-reference]")]
    assert reference and all(r["samples"] for r in reference)
    failed = _failed(rows)
    if not fault:
        assert not failed, failed[:1]
        return
    assert failed and all(r["id"].endswith("-reference]") for r in failed), failed[:1]


def test_an_in_place_kernel_more_accurate_than_cpu_passes_its_buffer_check(tmp_path: Path):
    """echo_npu's add_/add.out round `x + alpha * y` once; CPU rounds alpha * y to bfloat16
    first (alpha=-3.125, a -reference sample): the written values are judged by compare_result
    (as close to float64 as CPU's), and the buffer check then asks that the buffer hold them
    where CPU's view points, not CPU's values again (it failed 4 cases when the value set came)."""
    _, rows = _run(
        tmp_path, "conformance/test_conformance.py", "--ops", "add_.Tensor,add.out",
        "-k", "reference and (float16 or bfloat16)", env={},
    )  # fmt: skip
    assert len(rows) >= 4 and all(r["status"] == "passed" for r in rows), _failed(rows)[:1]
