"""Op specs for overloads other backends register (SDPA's overrideable kernels, quantize, the
*.Scalar_out / max.out family): their samples run, the CPU reference compares, and a device
kernel that is wrong in the way real backends were wrong fails the right check. CPU plays the
device (the op replaced by a wrapper), as in test_runner.py."""

from __future__ import annotations

import pytest
import torch

from conformance.ops import spec_for
from conformance.samples import calls_for
from tests.engine.fake_kernels import run_with_kernel

SDPA = "_scaled_dot_product_fused_attention_overrideable"


def _run(monkeypatch, overload, device_fn, dtype=torch.float32):
    calls = calls_for(overload, dtype, None)
    assert calls, f"no samples for {overload}"
    spec = spec_for(overload)
    return run_with_kernel(monkeypatch, overload, device_fn, calls, spec=spec)


def test_sdpa_overrideable_compares_the_attention_output(monkeypatch):
    reference = spec_for(SDPA).reference

    def backend_kernel(*args, **kwargs):  # right output, its own bookkeeping
        out, lse, *rest = reference(*args, **kwargs)
        return (out, lse.unsqueeze(-1), *rest[:4], torch.tensor(7), torch.tensor(9), rest[-1])

    assert _run(monkeypatch, SDPA, backend_kernel).failure is None

    def uninitialised(*args, **kwargs):
        out, *rest = reference(*args, **kwargs)
        return (torch.empty_like(out).fill_(7.0), *rest)

    failure = _run(monkeypatch, SDPA, uninitialised).failure
    assert failure is not None and failure.check == "values", failure
    assert "output 0" in failure.message


def test_sdpa_overrideable_backward_compares_gradients(monkeypatch):
    name = SDPA + "_backward"
    reference = spec_for(name).reference
    assert _run(monkeypatch, name, reference).failure is None

    def drops_key_grad(*args, **kwargs):
        gq, gk, gv, gb = reference(*args, **kwargs)
        return gq, torch.zeros_like(gk), gv, gb

    failure = _run(monkeypatch, name, drops_key_grad).failure
    assert failure is not None and failure.check == "values" and "output 1" in failure.message


def test_quantize_per_tensor_compares_integers_and_parameters(monkeypatch):
    real = torch.ops.aten.quantize_per_tensor.default
    assert _run(monkeypatch, "quantize_per_tensor", real).failure is None

    def wrong_zero_point(x, scale, zero_point, dtype):
        return real(x, scale, zero_point + 1, dtype)

    failure = _run(monkeypatch, "quantize_per_tensor", wrong_zero_point).failure
    assert failure is not None and failure.check == "values" and "zero point" in failure.message


@pytest.mark.parametrize(
    "overload",
    [
        "eq.Scalar_out",
        "ne.Scalar_out",
        "gt.Scalar_out",
        "max.out",
        "min.out",
        "max.unary_out",
        "_fused_sdp_choice",
        "set_.source_Storage",
        "index.Tensor_out",
    ],
)
def test_overloads_other_backends_register_have_samples(overload):
    assert calls_for(overload, torch.float32, None), overload


@pytest.mark.parametrize("overload", ["native_batch_norm", "native_batch_norm.out"])
def test_batch_norm_must_update_its_running_statistics(monkeypatch, overload):
    """native_batch_norm's schema does not mark running_mean/running_var as written, yet in
    training CPU updates them: CPU's own kernel passes (it used to fail `inputs`), a kernel that
    leaves them alone (cpu_fallback copies back only what the schema marks) fails (issue 20)."""
    real = torch.ops.aten.native_batch_norm.default

    def no_update(x, weight, bias, running_mean, running_var, training, momentum, eps, **out):
        frozen = [t.clone() if t is not None else None for t in (running_mean, running_var)]
        result = real(x, weight, bias, *frozen, training, momentum, eps)
        if not out:
            return result
        for name, value in zip(("out", "save_mean", "save_invstd"), result, strict=True):
            out[name].resize_(value.shape).copy_(value)
        return out["out"], out["save_mean"], out["save_invstd"]

    assert _run(monkeypatch, overload, None).failure is None
    failure = _run(monkeypatch, overload, no_update).failure
    assert failure is not None and failure.check == "values", failure
    assert "running_mean" in failure.message or "running_var" in failure.message
