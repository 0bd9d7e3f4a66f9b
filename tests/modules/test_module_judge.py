"""The modules family's engine (conformance/engine/modules): a case id names one case; clean
echo_npu passes a BatchNorm, an LSTM and a GRU case in train mode; the BatchNorm fault fails the
state comparison and the search names native_batch_norm; a device less accurate than CPU beyond
the measured allowance fails, one as accurate as CPU passes; the state_dict round trip fails
when loading loses the state; a random module's values are not compared."""

from __future__ import annotations

import gc
import warnings

import pytest
import torch

from conformance.engine.compare import Mismatch
from conformance.engine.measured import compare_value
from conformance.engine.modules import judge as judging
from conformance.engine.modules.cases import ModuleCase, enumerate_cases
from conformance.engine.modules.divergence import SearchChild, first_divergence
from conformance.engine.modules.step import prepare, run_step

BN = "nn.BatchNorm2d-float32-train-contiguous-0"


def test_case_ids_name_one_case():
    case = ModuleCase.parse("nn.BatchNorm2d-float32-train-channels_last-3")
    assert (case.module, case.dtype, case.training, case.memory_format, case.sample) == (
        "nn.BatchNorm2d", "float32", True, "channels_last", 3,
    )  # fmt: skip
    assert str(case) == "nn.BatchNorm2d-float32-train-channels_last-3"
    for bad in ("nn.ReLU-float32-train", "nn.ReLU-float32-sometimes-contiguous-0",
                "nn.ReLU-float32-eval-strided-0"):  # fmt: skip
        with pytest.raises(ValueError):
            ModuleCase.parse(bad)


def test_core_selection_covers_every_module_in_float32():
    cases, without = enumerate_cases("core", [torch.float32])
    assert without == {}
    assert {c.dtype for c in cases} == {"float32"} and {c.training for c in cases} == {True, False}
    assert "channels_last" in {c.memory_format for c in cases}
    assert len({c.module for c in cases}) > 100


@pytest.mark.parametrize("case", [BN, "nn.LSTM-float32-train-contiguous-0",
                                  "nn.GRU-float32-train-contiguous-1"])  # fmt: skip
def test_clean_echo_npu_passes(npu, case):
    verdict = judging.judge(ModuleCase.parse(case), "npu")
    assert verdict.check is None, verdict.message


def test_biased_running_var_fails_the_state_and_names_the_op(npu, faults):
    faults(["bn_running_var_biased"])
    verdict = judging.judge(ModuleCase.parse(BN), "npu")
    assert verdict.check == "state" and verdict.message.startswith("running_var after the step")
    assert verdict.searched and verdict.diverged is None  # the harness searches, in a child
    prepared = prepare(ModuleCase.parse(BN))
    _, seeds = run_step(prepared, "cpu")
    found = first_divergence(prepared, "npu", seeds)
    assert found is not None
    assert found.startswith("aten.native_batch_norm.default: running_var after the call"), found


def test_the_search_runs_in_a_child_and_its_failure_is_its_own(npu):
    """One child serves every search of a process (no cap that splits a finding); a child
    that cannot start or crashes is the search's failure, and the next search starts anew
    (the ended child's pipes closed: left to the collector, their ResourceWarning was written
    into whatever case was running when it ran)."""
    env = {"ECHO_NPU_FAULTS": "bn_running_var_biased"}
    with pytest.MonkeyPatch.context() as m:
        for name, value in env.items():
            m.setenv(name, value)
        child = SearchChild("echo_npu", "npu")
        try:
            found = [child.search(BN) for _ in range(3)]
            pid = child.proc.pid
            assert child.search(BN) and child.proc.pid == pid  # the same child, again
            child.proc.kill()  # a crash of the search's process
            child.proc.wait()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", ResourceWarning)
                again = child.search(BN)
                gc.collect()  # the ended child's pipes were closed, not left to the collector
        finally:
            child.close()
    # an unclosed pipe's ResourceWarning lands in whichever case the collector runs in
    assert not [w for w in seen if w.category is ResourceWarning], [str(w.message) for w in seen]
    for one in [*found, again]:
        assert one is not None and one.startswith("aten.native_batch_norm.default"), one
    broken = SearchChild("no_such_backend_module", "npu")  # the child cannot start
    assert broken.search(BN).startswith("not found: the search's process ended with 1")
    broken.close()


def test_eval_mode_does_not_update_the_state(npu, faults):
    faults(["bn_running_var_biased"])  # the fault is in the training update only
    verdict = judging.judge(ModuleCase.parse(BN.replace("train", "eval")), "npu")
    assert verdict.check is None, verdict.message


def _values(shift: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    truth = torch.linspace(0.01, 0.015, 64, dtype=torch.float64)  # float16's ulp: ~7.6e-6
    cpu = (truth + 1e-4).to(torch.float16)  # CPU's own error: ~1e-4
    return (truth + shift).to(torch.float16), cpu, truth


def test_less_accurate_than_cpu_beyond_the_allowance_fails():
    device, cpu, truth = _values(2e-3)
    with pytest.raises(Mismatch) as err:
        compare_value("output", "output", device, cpu, truth, True)
    assert err.value.check == "output"


def test_as_accurate_as_cpu_passes():
    device, cpu, truth = _values(-1.5e-4)  # off from CPU beyond 2x its error, as close to the truth
    with pytest.raises(Mismatch):
        compare_value("output", "output", device, cpu, None, True)  # no truth: fails
    assert compare_value("output", "output", device, cpu, truth, True)


def test_torch_declared_tolerance_passes_with_a_note():
    device, cpu, truth = _values(2e-3)
    assert not compare_value("grad", "g", device, cpu, truth, True, declared=(0.3, 0.04))


def test_state_dict_round_trip_fails_when_loading_loses_state(npu, monkeypatch):
    prepared = prepare(ModuleCase.parse(BN))
    _, seeds = run_step(prepared, "cpu")
    dev, _ = run_step(prepared, "npu", seeds)
    judging.round_trip(prepared, dev, "npu")  # clean: passes
    monkeypatch.setattr(torch.nn.Module, "load_state_dict", lambda self, sd, strict=True: None)
    with pytest.raises(Mismatch) as err:
        judging.round_trip(prepared, dev, "npu")
    assert err.value.check == "state_dict" and "running_mean" in err.value.message


def test_state_dict_round_trip_is_bit_for_bit(npu, monkeypatch):
    prepared = prepare(ModuleCase.parse(BN))
    _, seeds = run_step(prepared, "cpu")
    dev, _ = run_step(prepared, "npu", seeds)
    load = torch.nn.Module.load_state_dict

    def flipping(self, state, strict=True):  # every 0.0 loaded as -0.0: equal, not the same
        flipped = {k: v.where(v != 0, -v) if v.is_floating_point() else v for k, v in state.items()}
        return load(self, flipped, strict)

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", flipping)
    with pytest.raises(Mismatch) as err:
        judging.round_trip(prepared, dev, "npu")
    assert err.value.check == "state_dict" and "bias" in err.value.message


def test_random_module_values_are_not_compared(npu):
    case = next(
        c for c in enumerate_cases("core", [torch.float32])[0]
        if c.module == "nn.TransformerEncoderLayer" and c.training
    )  # fmt: skip
    prepared = prepare(case)
    cpu, seeds = run_step(prepared, "cpu")
    assert judging._random(prepared, cpu, seeds) == any(
        m.p > 0 for m in prepared.module.modules() if isinstance(m, torch.nn.Dropout)
    )


def test_the_op_specs_scales_reach_the_search_child_whole():
    """The search judges each op at its op case's tolerance: every spec's tol_scale (numbers,
    (rtol, atol) pairs, per-dtype maps) survives the trip to the child."""
    from conformance.engine.modules.divergence import decode_scales, encode_scales
    from conformance.ops import tolerance_scales

    scales = tolerance_scales()
    assert scales and decode_scales(encode_scales(scales)) == scales
    assert decode_scales("") == {}


@pytest.mark.parametrize("case", [BN, "nn.LSTM-float32-train-contiguous-0",
                                  "nn.Conv2d-float32-eval-channels_last-0"])  # fmt: skip
def test_kept_samples_build_the_same_case_without_module_db(case, tmp_path, monkeypatch):
    """A module's samples are kept in the sample cache: read back, they build the same module
    and inputs (and torch's tolerance), and module_db is not asked for them."""
    from conformance.engine.modules import step

    step.seeded_samples.cache_clear()
    drawn = prepare(ModuleCase.parse(case), str(tmp_path))
    step.seeded_samples.cache_clear()
    monkeypatch.setattr(step, "module_infos", lambda: pytest.fail("module_db asked again"))
    again = prepare(ModuleCase.parse(case), str(tmp_path))
    step.seeded_samples.cache_clear()
    assert type(again.module) is type(drawn.module) and again.upstream == drawn.upstream
    a, b = drawn.module.state_dict(), again.module.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for x, y in zip(*(torch.utils._pytree.tree_flatten(p.args)[0] for p in (drawn, again)),
                    strict=True):  # fmt: skip
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
