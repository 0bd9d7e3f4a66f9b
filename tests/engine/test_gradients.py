"""The -grad and -inference modes: each check fires on a planted wrong kernel, correct ones pass.

CPU plays the device (tests/engine/fake_kernels.py); the "device" op is a Python function with
the real schema, here a `torch.autograd.Function` whose forward is right and whose backward is
wrong in one way per test: what a backend's own autograd kernel (AutogradPrivateUse1) can get
wrong. tests/meta/ablate_checks.py shows which test catches which check being removed."""

from __future__ import annotations

import torch

from conformance.engine import gradients
from conformance.engine.calls import Call
from tests.engine.fake_kernels import run_with_kernel


def _gelu_with_backward(backward):
    class Gelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.ops.aten.gelu(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return backward(grad, x)

    return lambda x, approximate="none": Gelu.apply(x)


def _right(grad, x):
    return torch.ops.aten.gelu_backward(grad, x)


def _as_if_contiguous(grad, x):
    """Reads grad_output's memory as if it were contiguous (a kernel that ignores strides)."""
    flat = torch.as_strided(grad, grad.shape, torch.empty(grad.shape).stride(), 0)
    return torch.ops.aten.gelu_backward(flat, x)


CALLS = [Call("gelu", (torch.linspace(-3, 3, 12).reshape(3, 4),))]


def test_a_right_autograd_kernel_passes(monkeypatch):
    for layout in gradients.GRAD_CASE_LAYOUTS:
        out = run_with_kernel(
            monkeypatch, "gelu", _gelu_with_backward(_right), CALLS, layout, mode="grad"
        )
        assert out.failure is None and out.samples == 1, out.failure


def test_a_wrong_backward_fails_the_grad_case(monkeypatch):
    wrong = _gelu_with_backward(lambda grad, x: grad * (x > 0))  # relu's derivative
    out = run_with_kernel(monkeypatch, "gelu", wrong, CALLS, mode="grad")
    assert out.failure is not None and out.failure.check == "grad"
    assert "grad of self (grad_output contiguous)" in out.failure.message
    # the forward is right: the ordinary case passes
    assert run_with_kernel(monkeypatch, "gelu", wrong, CALLS).failure is None


def test_a_backward_that_ignores_grad_output_strides_fails(monkeypatch):
    wrong = _gelu_with_backward(_as_if_contiguous)
    out = run_with_kernel(monkeypatch, "gelu", wrong, CALLS, mode="grad")
    assert out.failure is not None and out.failure.check == "grad"
    assert "grad_output transposed" in out.failure.message or (
        "grad_output expanded" in out.failure.message
    )


def test_a_forward_without_autograd_graph_fails(monkeypatch):
    def detached(x, approximate="none"):
        return torch.ops.aten.gelu(x.detach())

    out = run_with_kernel(monkeypatch, "gelu", detached, CALLS, mode="grad")
    assert out.failure is not None and "does not require grad on the device" in (
        out.failure.message
    )


def test_no_derivative_on_cpu_is_not_applicable_not_a_pass(monkeypatch):
    calls = [Call("eq.Tensor", (torch.ones(3), torch.ones(3)))]
    out = run_with_kernel(monkeypatch, "eq.Tensor", None, calls, mode="grad")
    assert out.failure is None and out.samples == 0
    assert out.skip_reason and "not differentiable" in out.skip_reason


def test_an_out_kernel_returning_a_copy_on_inference_tensors_fails(monkeypatch):
    def add_out(a, b, alpha=1, out=None):
        torch.ops.aten.add.out(a, b, alpha=alpha, out=out)
        return out.clone() if out.is_inference() else out

    calls = [Call("add.out", (torch.ones(3), torch.ones(3)), {"out": torch.empty(3)})]
    out = run_with_kernel(monkeypatch, "add.out", add_out, calls, mode="inference")
    assert out.failure is not None and out.failure.check == "out"
    assert "on inference tensors inside torch.inference_mode()" in out.failure.message
    # outside inference mode ADInplaceOrView returns out itself: the ordinary case passes
    assert run_with_kernel(monkeypatch, "add.out", add_out, calls).failure is None


def test_a_kernel_that_differs_run_to_run_fails_only_its_repeat_case(monkeypatch):
    """The -repeat mode (engine/modes/repeat.py, one file): a kernel right on its first call
    and wrong later (as one reading memory it never wrote) passes the plain case."""
    runs = {"n": 0}

    def drifting_abs(x):
        runs["n"] += 1
        out = torch.abs(x)
        if runs["n"] > 1 and out.numel():
            out.view(-1)[-1] += runs["n"]  # the tail left as whatever memory held
        return out

    calls = [Call("abs", (torch.tensor([-1.0, 2.0, -3.0]),), {})]
    with monkeypatch.context() as patch:
        assert run_with_kernel(patch, "abs", drifting_abs, calls).failure is None
    runs["n"] = 0
    with monkeypatch.context() as patch:
        out = run_with_kernel(patch, "abs", drifting_abs, calls, mode="repeat")
    assert out.failure is not None and out.failure.check == "repeat", out.failure
    assert "two runs of the same sample on the device from the same inputs differ" in (
        out.failure.message
    )


def test_the_engine_call_is_what_autograd_grad_and_backward_compute():
    """grad_steps.run_engine skips torch.autograd.grad's Python preamble (it imports sympy to
    compare sizes): its gradients, its unused input's None and its accumulation into .grad are
    torch.autograd.grad's and backward()'s, and a grad_output of the wrong shape still raises."""
    from conformance.engine.grad_steps import autograd_backward, autograd_grad

    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    unused = torch.randn(2, dtype=torch.float64, requires_grad=True)
    out = torch.nn.functional.gelu(x) * 3
    g = torch.randn(3, 4, dtype=torch.float64)
    want = torch.autograd.grad([out], [x, unused], [g], retain_graph=True, allow_unused=True)
    got, exc = autograd_grad([out], [x, unused], [g])
    assert exc is None and got[1] is None
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert autograd_backward([out], [g]) is None
    torch.testing.assert_close(x.grad, want[0], rtol=0, atol=0)
    got, exc = autograd_grad([out], [x], [torch.randn(4, 3, dtype=torch.float64)])
    assert got is None and "shape" in str(exc)
