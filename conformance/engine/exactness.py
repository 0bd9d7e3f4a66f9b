"""Whether CPU's result for an (overload, dtype) is exact: correctly rounded, bit for bit.

"Close within a tolerance" is right where CPU itself is not correctly rounded (exp, softmax,
matmul, reductions). It is wrong where CPU's result is exact: a single IEEE operation (add, mul,
div, sqrt), a conversion, and every data-movement or selection op (copy, cat, index, where,
masked_fill, flip, max values, views). There the last bit is part of the answer, and the
`rounding` check (engine/checks.py) requires the device to match it bit for bit.

Exactness is decided by evidence, not by a list. `measure` runs the overload's own samples on
CPU, each also refilled with random values spanning the dtype's range (subnormals to near its
maximum, both signs) until at least `TARGET_ELEMENTS` floating result elements are compared,
and computes each again with every floating input upcast to float64. CPU is exact when every
result element equals the float64 result rounded to the result's dtype (NaN matching NaN; the
sign of a zero is the `signed-zero` check's). For +, -, *, / and sqrt of float32, float16 or
bfloat16 inputs the float64 result rounded once is the correctly rounded one (float64 has more
than 2p + 2 bits); an op that is not correctly rounded differs somewhere in a sample this size
(measured: exp, sin, sum, softmax, addcmul differ in float32 within the first thousand elements).

An op that accumulates (a result element depends on more than one element of one input:
cumsum, norms, losses, matmul) is not exact even where CPU's result is correctly rounded: CPU
accumulates some in double (cumsum, vector_norm), a device in float32 with another order, and
both are right. The dependence is measured too, with autograd on a few samples (the nonzero
entries of a Jacobian row); ops without a gradient are judged by their values alone.

`judge` decides per dtype: float32 by its own measurement; float16 and bfloat16 only where
float32 is exact too (a transcendental computed in float32 and rounded to half precision is
nearly always correctly rounded there, by the grace of float32, not by design: another
accurate device would differ); float64 has no wider type to measure against and is judged exact
where float32 is (the same single IEEE operation or data movement). An op spec can declare
exactness (`OpSpec.exact`: conversions, whose result IEEE defines). Fewer than `MIN_ELEMENTS`
compared elements prove nothing: such an op keeps its tolerance.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.calls import Call

TARGET_ELEMENTS = 4096  # result elements compared per (overload, dtype), refills included
MIN_ELEMENTS = 512  # fewer compared: no claim
MAX_REFILLS = 64  # refills of one sample with random values
SEED = 20261124
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what exactness judges
MEASURED = (torch.float32, torch.float16, torch.bfloat16)
PROBED = 16  # samples whose results' dependence on their inputs is probed (accumulation)


@dataclass(frozen=True)
class Exactness:
    """The verdict on CPU's results for one (overload, dtype)."""

    exact: bool
    elements: int  # result elements compared
    why: str  # how it was decided (a difference found, too few elements, declared, inferred)

    def to_json(self) -> list:
        return [self.exact, self.elements, self.why]

    @classmethod
    def from_json(cls, value: list) -> Exactness:
        return cls(bool(value[0]), int(value[1]), str(value[2]))


def _spanning(shape: torch.Size, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random values of `dtype` over its whole range: random sign, exponent uniform from the
    subnormals to a quarter of the largest power (sums and products stay finite mostly),
    random mantissa."""
    info = torch.finfo(dtype)
    lo = math.log2(info.tiny) + math.log2(info.eps)  # the smallest subnormal
    hi = math.log2(info.max) - 2
    n = math.prod(shape)
    exponent = torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo
    mantissa = 1 + torch.rand(n, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    values = sign * mantissa * torch.exp2(exponent.floor())
    # a fifth of the elements ordinary (|x| in [2^-4, 2^4]): the range most samples live in
    ordinary = torch.rand(n, generator=g) < 0.2
    values = torch.where(ordinary, sign * mantissa * torch.exp2(exponent.remainder(8) - 4), values)
    return values.to(dtype).reshape(shape)


def _refilled(call: Call, data: set[int], dtype: torch.dtype, g: torch.Generator) -> Call:
    """`call` with the floating data operands of `dtype` (positions in `data`) refilled."""

    def refill(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return _spanning(x.shape, dtype, g).contiguous()
        return x

    args = tuple(refill(a) if i in data else a for i, a in enumerate(call.args))
    return Call(call.overload, args, dict(call.kwargs), call.cpu_args)


def _fresh(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _upcast(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(torch.float64)
    return x


def _run(op: Any, args: tuple, kwargs: dict) -> list[Any] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a sample the refilled values do not suit: skipped
        return None
    return tree_flatten(result)[0]


def _different(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """Elements of `got` that are not `exact` rounded to got's dtype (NaN matches NaN, +0 -0)."""
    rounded = exact.to(got.dtype)
    same = (got == rounded) | (got.isnan() & rounded.isnan())
    return ~same


def measure(
    op: Any, calls: list[Call], dtype: torch.dtype, data: set[int], functional: Any = None
) -> Exactness:
    """CPU's results of `calls` (samples of `op` for `dtype`) against float64, refilled with
    values over the dtype's range; `data`: positions of the data operands (refilled);
    `functional`: the op's functional sibling (for an in-place or out= op: autograd's)."""
    g = torch.Generator().manual_seed(SEED)
    usable = [c for c in calls if not c.cpu_args]
    if not usable:
        return Exactness(False, 0, "no sample to measure")
    per_call = max(1, TARGET_ELEMENTS // len(usable))
    compared = 0
    for call in usable:
        done, variant = 0, call
        for refill in range(MAX_REFILLS + 1):
            if refill:
                variant = _refilled(call, data, dtype, g)
            args, kwargs = tree_map(_fresh, (variant.args, variant.kwargs))
            got = _run(op, args, kwargs)
            wide = _run(op, *tree_map(_upcast, (variant.args, variant.kwargs)))
            if got is None or wide is None or len(got) != len(wide):
                if refill == 0:
                    break  # the sample itself does not run: nothing to refill
                continue
            for a, e in zip(got, wide, strict=True):
                if not (isinstance(a, torch.Tensor) and a.is_floating_point()):
                    continue
                if not isinstance(e, torch.Tensor) or e.shape != a.shape:
                    return Exactness(False, compared, "the float64 run gives another result shape")
                bad = _different(a, e)
                if bool(bad.any()):
                    i = int(bad.reshape(-1).nonzero()[0, 0])
                    x, y = a.reshape(-1)[i].item(), e.reshape(-1)[i].to(a.dtype).item()
                    return Exactness(
                        False,
                        compared,
                        f"not correctly rounded: {x!r} where float64 rounds to {y!r} "
                        f"({call.signature()})",
                    )
                compared += a.numel()
                done += a.numel()
            if done >= per_call or not data:
                break
    if compared < MIN_ELEMENTS:
        return Exactness(False, compared, f"only {compared} result elements to compare")
    for call in usable[:PROBED]:
        many = _accumulated(functional or op, call, data)
        if many > 1:
            return Exactness(
                False,
                compared,
                f"accumulates: a result element depends on {many} elements of one input "
                f"({call.signature()}); the order and width of the sum are the device's",
            )
    return Exactness(True, compared, f"correctly rounded on {compared} elements")


def _accumulated(op: Any, call: Call, data: set[int]) -> int:
    """The most elements of one data operand that one result element depends on (autograd:
    the nonzero entries of a Jacobian row), over the first, middle and last result element; 0
    where it cannot be told (no gradient: integer or non-differentiable ops)."""
    leaves: list[torch.Tensor] = []

    def leaf(i: int, x: Any) -> Any:
        if i in data and isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            leaves.append(x.detach().to(torch.float64).requires_grad_())
            return leaves[-1].clone()  # a non-leaf: in-place overloads may write it
        return x

    args = tuple(leaf(i, a) for i, a in enumerate(call.args))
    kwargs = {k: v for k, v in call.kwargs.items() if k != "out"}
    if not leaves:
        return 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = tree_flatten(op(*args, **kwargs))[0]
            results = [t for t in out if isinstance(t, torch.Tensor) and t.requires_grad]
            most = 0
            for r in results:
                flat = r.reshape(-1)
                for i in sorted({0, flat.numel() // 2, flat.numel() - 1}):
                    grads = torch.autograd.grad(
                        flat[i], leaves, retain_graph=True, allow_unused=True
                    )
                    counts = [int((g != 0).sum()) for g in grads if g is not None]
                    most = max([most, *counts])
            return most
    except Exception:  # noqa: BLE001 - no gradient to tell by: the values' evidence stands
        return 0


def judge(own: Exactness | None, float32: Exactness | None, dtype: torch.dtype) -> Exactness:
    """The verdict for `dtype` from its own measurement and float32's (see the docstring)."""
    if dtype == torch.float32:
        return float32 if float32 is not None else Exactness(False, 0, "not measured")
    if float32 is None or not float32.exact:
        why = float32.why if float32 is not None else "float32 not measured"
        return Exactness(False, 0, f"float32 is not exact ({why})")
    if dtype == torch.float64:
        return Exactness(True, 0, f"float32 is exact ({float32.why}); float64 inferred")
    assert own is not None
    return own
