"""The faults the power tool (`power.py`) plants in echo_npu: the kernels of the families table.

The families (`fault_families.py`) name each fault, its check, overload, grid and targets. A
fault is planted by overriding one of echo_npu's kernels from Python (`torch.library`,
PrivateUse1 or AutogradPrivateUse1, `install`): the kernel computes the right result on CPU,
then errs by the magnitude the `Planted` state holds (an
output scaled by 1+e, one element off, a gradient scaled, a bernoulli p shifted by d, a normal
mean shifted by d sigma or its std scaled, uniform bounds shifted, an exponential rate or
geometric p scaled; a skipped tensor of a foreach list and a stale written argument are on or
off). Magnitude 0 is the right kernel with the fault's machinery (the control). A perturbed
result is rounded to the dtype, so no fault is smaller than the dtype's resolution.

The kernels stay overridden for the life of the process. Needs echo_npu's dispatch key.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.measure.fault_families import FAMILIES

__all__ = ["Planted", "install"]


@dataclass
class Planted:
    """The magnitude every planted kernel reads when it runs (0: the right result)."""

    family: str = ""
    magnitude: float = 0.0
    draws: int = 0  # the planted random kernels' own generator stream
    libs: list[Any] = field(default_factory=list)

    def on(self, family: str) -> float:
        return self.magnitude if self.family == family else 0.0

    def generator(self) -> torch.Generator:
        """A CPU generator of the planted random kernels' own: another stream than the one
        torch.manual_seed gives CPU (a device with its own generator)."""
        self.draws += 1
        return torch.Generator().manual_seed(987_654_321 + self.draws)


def _host(x: Any) -> Any:
    return x.cpu() if isinstance(x, torch.Tensor) and x.device.type != "cpu" else x


def _rounded(t: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """`t * scale` computed in float64, rounded to `t`'s dtype."""
    return (t.to(torch.float64) * scale).to(t.dtype)


def _toward_zero(t: torch.Tensor) -> torch.Tensor:
    """Every finite nonzero element one ulp toward zero (in sign-magnitude bits, the integer
    one lower for either sign)."""
    if not t.is_floating_point():
        return t
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    bits = t.contiguous().view(ints)
    lowered = torch.where((t != 0) & t.isfinite(), bits - 1, bits)
    return lowered.view(t.dtype)


def _away_from_zero(t: torch.Tensor) -> torch.Tensor:
    """Every finite element one ulp away from zero (zeros, inf and NaN as they are)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    bits = t.contiguous().view(ints)
    return torch.where((t != 0) & t.isfinite(), bits + 1, bits).view(t.dtype)


def install(state: Planted) -> None:
    """Override echo_npu's kernels of every family's overload with planted ones."""
    lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
    state.libs.append(lib)

    def sqrt(a: torch.Tensor) -> torch.Tensor:
        out = torch.ops.aten.sqrt.default(_host(a))
        e = state.on("output scaled by 1+e")
        if e and out.is_floating_point():
            out = _rounded(out, 1 + e)
        if state.on("1 ulp away from zero on every 8th element") and out.is_floating_point():
            flat = out.reshape(-1).clone()
            flat[7::8] = _away_from_zero(flat[7::8])
            out = flat.reshape(out.shape)
        return out.to(a.device)

    def mul(a: torch.Tensor, b: Any) -> torch.Tensor:
        out = torch.ops.aten.mul.Tensor(_host(a), _host(b))
        e = state.on("output scaled by 1+e")
        if e and out.is_floating_point():
            out = _rounded(out, 1 + e)
        if state.on("1 ulp toward zero, in an op CPU rounds correctly"):
            out = _toward_zero(out)
        e = state.on("one element off by e")
        if e and out.is_floating_point() and out.numel():
            flat = out.reshape(-1).clone()
            flat[:1] = _rounded(flat[:1], 1 + e)
            out = flat.reshape(out.shape)
        return out.to(a.device)

    def exp(a: torch.Tensor) -> torch.Tensor:
        out = torch.ops.aten.exp.default(_host(a))
        e = state.on("the smallest result scaled by 1+e")
        if e and out.is_floating_point() and out.numel():
            flat = out.reshape(-1).clone()
            i = int(flat.abs().to(torch.float64).argmin())
            flat[i : i + 1] = _rounded(flat[i : i + 1], 1 + e)
            out = flat.reshape(out.shape)
        return out.to(a.device)

    def cumsum(a: torch.Tensor, dim: int, *, dtype: Any = None) -> torch.Tensor:
        out = torch.ops.aten.cumsum.default(_host(a), dim, dtype=dtype)
        e = state.on("output scaled by 1+e")
        if e and out.is_floating_point():
            out = _rounded(out, 1 + e)
        return out.to(a.device)

    def drawn(self: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        self.copy_(values.to(self.dtype))
        return self

    def bernoulli_(self: torch.Tensor, p: float = 0.5, generator: Any = None) -> torch.Tensor:
        q = min(max(p + state.on("bernoulli p + d"), 0.0), 1.0)
        host = torch.empty(self.shape, dtype=torch.float64).bernoulli_(
            q, generator=state.generator()
        )
        return drawn(self, host)

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator: Any = None):
        m = mean + state.on("normal mean + d sigma") * std
        s = std * (1 + state.on("normal std x (1+d)"))
        host = torch.empty(self.shape, dtype=torch.float64).normal_(
            m, s, generator=state.generator()
        )
        return drawn(self, host)

    def uniform_(self, low: float = 0.0, high: float = 1.0, generator: Any = None):
        shift = state.on("uniform bounds + d x width") * (high - low)
        host = torch.empty(self.shape, dtype=torch.float64).uniform_(
            low + shift, high + shift, generator=state.generator()
        )
        return drawn(self, host)

    def exponential_(self, lambd: float = 1.0, generator: Any = None):
        rate = lambd * (1 + state.on("exponential lambda x (1+d)"))
        host = torch.empty(self.shape, dtype=torch.float64).exponential_(
            rate, generator=state.generator()
        )
        return drawn(self, host)

    def geometric_(self, p: float, generator: Any = None):
        q = min(p * (1 + state.on("geometric p x (1+d)")), 0.999)
        host = torch.empty(self.shape, dtype=torch.float64).geometric_(
            q, generator=state.generator()
        )
        return drawn(self, host)

    def random_from(self, low: int, high: Any = None, generator: Any = None):
        host = torch.empty(self.shape, dtype=torch.float64).random_(
            low, high, generator=state.generator()
        )
        share = state.on("random integers: a share d drawn as the lowest")
        if share:
            drawn_low = torch.rand(self.shape, generator=state.generator(), dtype=torch.float64)
            host[drawn_low < share] = low
        return drawn(self, host)

    def multinomial(self, num_samples: int, replacement: bool = False, generator: Any = None):
        weights = self.cpu().to(torch.float64).clone()
        weights[..., 0] *= 1 + state.on("multinomial weight of category 0 x (1+d)")
        host = torch.multinomial(weights, num_samples, replacement, generator=state.generator())
        return host.to(self.device)

    def foreach_mul_(tensors: list[torch.Tensor], scalar: Any) -> None:
        skip = bool(state.on("a foreach list skips its last tensor"))
        for i, t in enumerate(tensors):
            if skip and i == len(tensors) - 1:
                continue
            t.copy_(torch.ops.aten.mul.Scalar(t.cpu(), scalar))

    def add_(self: torch.Tensor, other: Any, alpha: Any = 1) -> torch.Tensor:
        host = self.cpu()
        before = host.clone()
        host.add_(_host(other), alpha=alpha)  # CPU's in-place semantics (and errors)
        if state.on("an in-place op leaves one element stale") and host.numel():
            host.reshape(-1)[:1] = before.reshape(-1)[:1]
        self.copy_(host)
        return self

    with warnings.catch_warnings():  # "overriding a previously registered kernel": on purpose
        warnings.simplefilter("ignore")
        lib.impl("mul.Tensor", mul)
        lib.impl("sqrt", sqrt)
        lib.impl("exp", exp)
        lib.impl("cumsum", cumsum)
        lib.impl("bernoulli_.float", bernoulli_)
        lib.impl("normal_", normal_)
        lib.impl("uniform_", uniform_)
        lib.impl("exponential_", exponential_)
        lib.impl("geometric_", geometric_)
        lib.impl("multinomial", multinomial)
        lib.impl("random_.from", random_from)
        lib.impl("_foreach_mul_.Scalar", foreach_mul_)
        lib.impl("add_.Tensor", add_)
        for overload in sorted({f.overload for f in FAMILIES if f.mode == "grad"}):
            _install_scaled_backward(state, overload)


def _install_scaled_backward(state: Planted, overload: str) -> None:
    """An autograd kernel for `overload` on the device: the forward is the device's own, the
    backward is CPU's gradient of the same call, scaled by 1+e."""
    op = getattr(torch.ops.aten, overload.split(".")[0])
    op = getattr(op, overload.split(".")[1] if "." in overload else "default")

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, n: int, kwnames: tuple[str, ...], *args: Any) -> Any:
            ctx.n, ctx.kwnames, ctx.args = n, kwnames, args
            with torch._C._AutoDispatchBelowAutograd():
                out = op(*args[:n], **dict(zip(ctx.kwnames, args[n:], strict=True)))
            outs = out if isinstance(out, tuple) else (out,)
            with torch.enable_grad():  # which outputs CPU differentiates
                ctx.differentiable = [
                    isinstance(o, torch.Tensor) and o.requires_grad for o in _cpu_outputs(ctx)
                ]
            ctx.mark_non_differentiable(
                *[o for o, d in zip(outs, ctx.differentiable, strict=True) if not d]
            )
            return out

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            with torch.enable_grad():
                inputs, outs = _cpu_outputs(ctx, keep=True)
                pairs = [
                    (o, g.cpu())
                    for o, g, d in zip(outs, grads, ctx.differentiable, strict=True)
                    if d and g is not None
                ]
                found = torch.autograd.grad(
                    [o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True
                )
            e = state.on("gradient scaled by 1+e")
            by_id = dict(zip([id(x) for x in inputs], found, strict=True))
            result: list[Any] = [None, None]  # n, kwnames
            for arg, host in zip(ctx.args, ctx.host_args, strict=True):
                g = by_id.get(id(host))
                if g is not None and e:
                    g = _rounded(g, 1 + e)
                result.append(g.to(arg.device) if g is not None else None)
            return tuple(result)

    def _cpu_outputs(ctx: Any, keep: bool = False) -> Any:
        ctx.host_args = [
            a.detach().cpu().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in ctx.args
        ]
        n = ctx.n
        out = op(*ctx.host_args[:n], **dict(zip(ctx.kwnames, ctx.host_args[n:], strict=True)))
        outs = out if isinstance(out, tuple) else (out,)
        if not keep:
            return outs
        inputs = [a for a in ctx.host_args if isinstance(a, torch.Tensor) and a.requires_grad]
        return inputs, outs

    lib = torch.library.Library("aten", "IMPL", "AutogradPrivateUse1")
    state.libs.append(lib)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return Scaled.apply(len(args), tuple(kwargs), *args, *kwargs.values())

    lib.impl(overload, kernel)
