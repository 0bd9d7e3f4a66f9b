"""The autocast family's engine (conformance/engine/autocast): the dispatcher lists the ops with
an autocast kernel per key; running an op's OpInfo sample shows its class on CUDA (fake tensors,
no GPU), on CPU and on echo_npu (CUDA's policy); the planted matmul fault is a `lower` case
failing with the class on the first line; a device with no kernel under its key fails with the
one message that says so; values in a region are compared with CPU's."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.engine.autocast import policy
from conformance.engine.autocast.judge import judge, sample_of
from conformance.engine.autocast.policy import device_regime
from conformance.engine.autocast.registrations import device_key, kernels, reference_kernels

NPU = "npu"  # a torch.device once echo_npu registered the name (the npu fixture)


def test_the_dispatcher_lists_each_keys_ops():
    refs = reference_kernels()
    assert {"cuda", "cpu"} <= set(refs)
    assert "mm" in refs["cuda"] and "softmax" in refs["cuda"] and "cholesky" not in refs["cuda"]
    assert "cholesky" in refs["cpu"]
    assert device_key("PrivateUse1") == "AutocastPrivateUse1" and device_key("NoSuchKey") is None
    assert kernels("NoSuchKey") == {}


@pytest.mark.parametrize(
    "op, cuda, cpu",
    [("mm", "lower", "lower"), ("softmax", "fp32", "none"), ("dot", "promote", "none"),
     ("exp", "fp32", "none"), ("cholesky", "none", "fp32")],
)  # fmt: skip
def test_classes_observed_by_running(op, cuda, cpu):
    info, sample = sample_of(op)
    assert policy.observe(info.op, sample, policy.cuda_regime()).policy == cuda
    assert policy.observe(info.op, sample, policy.cpu_regime(torch.bfloat16)).policy == cpu


def test_echo_npu_follows_cuda_and_its_values_match_cpus(npu):
    for op in ("mm", "softmax", "dot", "exp", "cholesky", "conv2d"):
        verdict = judge(op, torch.device(NPU), torch.float16, "AutocastPrivateUse1", 1)
        assert verdict.message == "", verdict.message
        assert verdict.policies["npu"] == verdict.policies["cuda"], (op, verdict.policies)
    assert judge(
        "mm", torch.device(NPU), torch.float16, "AutocastPrivateUse1", 1
    ).values.startswith("compared")


def test_matmul_left_in_float32_fails_on_its_class(npu, faults):
    faults(["autocast_matmul_fp32"])
    verdict = judge("matmul", torch.device(NPU), torch.float16, "AutocastPrivateUse1", 1)
    first = verdict.message.splitlines()[0]
    assert first.startswith("[autocast lower] matmul: CUDA's policy is lower precision"), first
    assert verdict.policies["npu"] == "fp32" and verdict.policies["cuda"] == "lower"
    assert judge("mm", torch.device(NPU), torch.float16, "AutocastPrivateUse1", 1).message == ""


def test_no_kernel_under_the_key_is_one_message(npu, monkeypatch):
    def uncast(device, lower):  # a device whose regions cast nothing: no kernel under its key
        real = device_regime(device, lower)
        return policy.Regime(real.device, lower, real.place, contextlib.nullcontext)

    monkeypatch.setattr(policy, "device_regime", uncast)
    firsts = {
        judge(op, torch.device(NPU), torch.float16, "AutocastPrivateUse1", 0)
        .message.splitlines()[0]
        .replace(op, "<op>")
        for op in ("mm", "softmax", "dot")
    }
    assert firsts == {
        "[autocast] the device registers no autocast kernel (AutocastPrivateUse1 has none): "
        "<op> runs in a torch.autocast region as without it, where CUDA's policy casts"
    }, firsts


class MmOff(TorchDispatchMode):
    """mm's results 1 % off: the device computes wrong inside the region only."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 1.01 if func is torch.ops.aten.mm.default else out


def test_region_values_differ_when_the_device_computes_wrong(npu, monkeypatch):
    def off(device, lower):
        real = device_regime(device, lower)

        @contextlib.contextmanager
        def region():
            with real.region(), MmOff():
                yield

        return policy.Regime(real.device, lower, real.place, region)

    monkeypatch.setattr(policy, "device_regime", off)
    verdict = judge("mm", torch.device(NPU), torch.float16, "AutocastPrivateUse1", 1)
    assert verdict.message.startswith("[autocast values] mm: in the device's autocast region")
    assert "outside autocast, on the same inputs, the device agrees with CPU" in verdict.message
    assert verdict.policies["npu"] == "lower"


def test_an_op_wrong_outside_autocast_too_is_left_to_its_op_cases(npu, faults):
    faults(["fallback_addmm_drops_bias"])  # addmm is wrong on the device, region or not
    verdict = judge("addmm", torch.device(NPU), torch.float16, "AutocastPrivateUse1", 1)
    assert verdict.message == "" and verdict.values.startswith("not judged: addmm differs")


@pytest.mark.parametrize("op", ["mm", "einsum", "max_pool3d", "_upsample_bilinear2d_aa", "exp"])
def test_a_kept_sample_is_the_one_searched_and_spares_op_db(op, tmp_path, monkeypatch):
    """The sample found for an op is kept in the sample cache with its OpInfo's function (a
    lambda for einsum, a closure for max_pool3d, a torch.ops packet for the aa upsample): read
    back, it computes what the searched one does, and no search (no op_db) runs for it."""
    from conformance.engine.autocast import judge as judging

    info, sample = sample_of(op, str(tmp_path))
    want = info.op(sample.input, *sample.args, **sample.kwargs)
    monkeypatch.setattr(judging, "_first_sample", lambda op: pytest.fail(f"searched {op} again"))
    kept_info, kept = sample_of(op, str(tmp_path))
    got = kept_info.op(kept.input, *kept.args, **kept.kwargs)
    for a, b in zip(*(torch.utils._pytree.tree_flatten(x)[0] for x in (got, want)), strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)
    assert judge(op, torch.device("cpu"), torch.bfloat16, None, 0, True, str(tmp_path)).policies
