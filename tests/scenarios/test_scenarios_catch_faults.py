"""Each injected echo_npu fault makes the relevant scenario fail with a message naming the op.

The scenarios run in a subprocess with the guard allocator (red zones) and one fault switched on;
the assertions are on pytest's output (the results writer only records op cases).
"""

from __future__ import annotations

import re

import pytest

GUARD = {"ECHO_NPU_ALLOCATOR": "guard"}


def _failed(output: str) -> list[str]:
    return re.findall(r"^FAILED (\S+)", output, flags=re.M)


def test_scenarios_pass_without_faults(run_scenarios):
    run = run_scenarios(env=GUARD)
    assert run.returncode == 0, run.output[-3000:]
    assert re.search(r"\d+ passed", run.output), run.output[-2000:]
    assert not re.search(r"\d+ (failed|xpassed|error)", run.output), run.output[-2000:]


# fault (":" a label where one fault has several) -> (-k selection, scenario that must fail,
# texts its failure must contain)
FAULTS = {
    "masked_fill_overflow": (
        "attention_mask_pipeline",
        "test_attention_mask_pipeline[left_padded]",
        ["masked_fill_.Scalar on a transposed view", "red zone", "first seen after masked_fill_"],
    ),
    "copy_ignores_offset": (
        "save_load",
        "test_save_load_tensors_views_and_slices",
        ["storage_offset 10", "_copy_from"],
    ),
    "inplace_returns_new": (
        "mutate_after_use and add",
        "test_mutate_after_use[add-functional]",
        ["add_.Tensor on the input after add.Tensor"],
    ),
    "leak": (
        "mutate_after_use and mul",
        "test_mutate_after_use[mul-functional]",
        ["[leak]", "allocated by mul.Tensor"],
    ),
    "foreach_mul_skips_last": (
        "optimizer_step and SGD and momentum and foreach",
        "test_optimizer_step[SGD-momentum-foreach]",
        ["SGD(lr=0.1, momentum=0.9, foreach=True) step 2: parameter 3"],
    ),
    # AdamW's foreach weight decay skips the last parameter: at step 1 (v still 0) that is a
    # 1e-5 relative error, caught only by the replay (CPU's AdamW fed the device's gradients);
    # against CPU's own training, rounding of near-zero gradients can move a parameter further
    "foreach_mul_skips_last:adamw": (
        "qwen2_training",
        "test_qwen2_training",
        [
            "Qwen2 step 1: parameter lm_head.weight after AdamW (CPU's AdamW fed the device's "
            "gradients)"
        ],
    ),
    "fused_sgd_wrong_momentum": (
        "optimizer_step and SGD and momentum and fused",
        "test_optimizer_step[SGD-momentum-fused]",
        ["SGD(lr=0.1, momentum=0.9, fused=True) step 2: parameter"],
    ),
    "fallback_addmm_drops_bias": (  # addmm reaches the device through its cpu_fallback
        "exported_program and small_cnn",
        "test_exported_program_on_the_device_matches_eager_and_cpu[small_cnn]",
        ["eager small_cnn: device result differs from CPU"],
    ),
    "fallback_bn_legit_drops_var": (  # only the decomposed program calls it: export-specific
        "exported_program and small_cnn",
        "test_exported_program_on_the_device_matches_eager_and_cpu[small_cnn]",
        ["exported small_cnn (core ATen) against cpu eager: device result differs"],
    ),
    "segfault_empty": (
        "attention_mask_pipeline",
        "test_attention_mask_pipeline[empty_batch]",
        ["[crash]", "SIGSEGV", "[scenario step] sum.dim_IntList"],
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_fails_the_relevant_scenario(run_scenarios, fault):
    select, scenario, texts = FAULTS[fault]
    run = run_scenarios("-k", select, env={**GUARD, "ECHO_NPU_FAULTS": fault.split(":")[0]})
    assert run.returncode == 1, run.output[-3000:]
    failed = _failed(run.output)
    assert any(f.endswith("::" + scenario) for f in failed), (
        f"{fault}: {scenario} did not fail; failed: {failed}\n{run.output[-3000:]}"
    )
    for text in texts:
        assert text in run.output, f"{fault}: {text!r} not in the output\n{run.output[-3000:]}"


def test_segfault_costs_only_the_crashing_scenario(run_scenarios):
    run = run_scenarios(
        "-k", "attention_mask_pipeline", env={**GUARD, "ECHO_NPU_FAULTS": "segfault_empty"}
    )
    failed = _failed(run.output)
    assert [f.split("::")[-1] for f in failed] == ["test_attention_mask_pipeline[empty_batch]"], (
        run.output[-3000:]
    )
    assert "4 passed" in run.output, run.output[-2000:]
