"""How CPU rounds one (overload, dtype), measured: the evidence `exactness.judge` decides by.

`measure` runs the overload's own samples on CPU, each also refilled with random values
spanning the dtype's range (subnormals to near its maximum, both signs; integers over their
whole range) until at least `TARGET_ELEMENTS` floating result elements are compared, and
computes each again with every floating input upcast to float64 (an integer or bool data operand
converted to the result's dtype first, as type promotion does: int32 / int32 is the float32
division of the converted operands). A float16/bfloat16 op with one 16-bit input is run on all
65,536 values of the type instead (exhaustive). For +, -, *, / and sqrt of float32, float16 or
bfloat16 inputs the float64 result rounded once is the correctly rounded one (float64 has more
than 2p + 2 bits). The measurement counts the elements CPU does not round correctly and their
largest ulp distance (`Measured`). Whether a result element depends on more than one element
of one input (accumulation) is measured with autograd on a few samples (the nonzero entries of
a Jacobian row). Fewer than `MIN_ELEMENTS` compared elements prove nothing: such an op keeps
its tolerance.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import ieee
from conformance.engine.calls import Call
from conformance.engine.exactness import FLOATS, Measured, run_quietly, ulp_distance, wide_args

TARGET_ELEMENTS = 4096  # result elements compared per (overload, dtype), refills included
MIN_ELEMENTS = 512  # fewer compared: no claim
MAX_REFILLS = 64  # refills of one sample with random values
SEED = 20261124
HALF = (torch.float16, torch.bfloat16)
#: case dtypes measured on their own (float64 is inferred from float32)
MEASURED = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)
PROBED = 16  # samples whose results' dependence on their inputs is probed (accumulation)


def _spanning(shape: torch.Size, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random values of `dtype` over its whole range: floats of random sign, exponent uniform
    from the subnormals to a quarter of the largest power (sums and products stay finite
    mostly), random mantissa; integers uniform over the type."""
    n = math.prod(shape)
    if dtype == torch.bool:
        return (torch.rand(n, generator=g) < 0.5).reshape(shape)
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, (n,), generator=g, dtype=dtype).reshape(shape)
    info = torch.finfo(dtype)
    lo = math.log2(info.tiny) + math.log2(info.eps)  # the smallest subnormal
    hi = math.log2(info.max) - 2
    exponent = torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo
    mantissa = 1 + torch.rand(n, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    values = sign * mantissa * torch.exp2(exponent.floor())
    # a fifth of the elements ordinary (|x| in [2^-4, 2^4]): the range most samples live in
    ordinary = torch.rand(n, generator=g) < 0.2
    values = torch.where(ordinary, sign * mantissa * torch.exp2(exponent.remainder(8) - 4), values)
    return values.to(dtype).reshape(shape)


def every_value(dtype: torch.dtype) -> torch.Tensor:
    """All 65,536 values of a 16-bit floating type, as a 1-D tensor of it."""
    return torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)


def _refilled(call: Call, data: set[int], dtype: torch.dtype, g: torch.Generator) -> Call:
    """`call` with the data operands of `dtype` (positions in `data`) refilled."""

    def refill(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return _spanning(x.shape, dtype, g).contiguous()
        return x

    args = tuple(refill(a) if i in data else a for i, a in enumerate(call.args))
    return Call(call.overload, args, dict(call.kwargs), call.cpu_args)


def _exhaustive(call: Call, data: set[int], dtype: torch.dtype) -> Call | None:
    """`call` with its one data operand of a 16-bit `dtype` replaced by every value of the type
    (None: the call has another number of such operands, or other tensor operands)."""
    if dtype not in HALF:
        return None
    found = [i for i in data if i < len(call.args) and isinstance(call.args[i], torch.Tensor)]
    if len(found) != 1 or call.args[found[0]].dtype != dtype:
        return None
    if any(isinstance(v, torch.Tensor) for v in call.kwargs.values()):
        return None  # an out= sized for the sample
    args = list(call.args)
    args[found[0]] = every_value(dtype)
    return Call(call.overload, tuple(args), {}, call.cpu_args)


def _fresh(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _floats(leaves: list[Any]) -> list[torch.Tensor]:
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.dtype in FLOATS]


class _Tally:
    """Elements compared, and those not correctly rounded, over a measurement."""

    def __init__(self) -> None:
        self.elements = self.wrong = self.ulps = 0
        self.first = ""

    def add(self, got: torch.Tensor, exact: torch.Tensor, call: Call) -> None:
        if got.dtype == torch.float64:
            return  # no wider type: the float64 run is CPU's own result, no evidence
        rounded = exact.to(got.dtype)
        distance = ulp_distance(got, rounded).reshape(-1)
        bad = distance > 0
        if bool(bad.any()) and not self.first:
            i = int(bad.nonzero()[0, 0])
            x, y = got.reshape(-1)[i].item(), rounded.reshape(-1)[i].item()
            self.first = f"{x!r} where float64 rounds to {y!r} ({call.signature()})"
        self.wrong += int(bad.sum())
        self.ulps = max(self.ulps, int(distance.max()) if distance.numel() else 0)
        self.elements += got.numel()


def measure_saved(overload: str, path: str, dtype: torch.dtype, data: set[int]) -> list:
    """`measure` of `overload`'s calls saved at `path` (calls.save_calls), as JSON: what a
    forked child runs (samples/guarded.py `forked_call`)."""
    from conformance.engine.calls import load_calls
    from conformance.engine.discovery import resolve
    from conformance.engine.siblings import functional_of

    calls = load_calls(path)[""][overload]
    return measure(resolve(overload), calls, dtype, data, functional_of(overload)).to_json()


def measure(
    op: Any, calls: list[Call], dtype: torch.dtype, data: set[int], functional: Any = None
) -> Measured:
    """CPU's results of `calls` (samples of `op` for `dtype`) against float64, refilled with
    values over the dtype's range (every value of a 16-bit type where the op has one such
    input); `data`: positions of the data operands (refilled); `functional`: the op's
    functional sibling (for an in-place or out= op: autograd's)."""
    g = torch.Generator().manual_seed(SEED)
    schema = getattr(op, "_schema", None)
    if schema is not None and not schema.returns and functional is not None:
        op = functional  # an in-place op that returns nothing (`_foreach_mul_`): same values
    usable = [
        c
        for c in calls
        if not c.cpu_args and (schema is None or ieee.single_operation(schema, c.args, c.kwargs))
    ]
    if not usable:
        return Measured(0, failed="no sample to measure")
    tally = _Tally()
    exhaustive = _measure_exhaustive(op, usable, dtype, data, tally)
    if not exhaustive:
        _measure_refilled(op, usable, dtype, data, g, tally)
    if tally.elements < MIN_ELEMENTS and not tally.wrong:  # a difference is evidence enough
        return Measured(tally.elements, failed=f"only {tally.elements} result elements to compare")
    many = 0
    if dtype.is_floating_point:
        for call in usable[:PROBED]:
            many = max(many, _accumulated(functional or op, call, data))
            if many > 1:
                break
    return Measured(
        tally.elements, tally.wrong, tally.ulps, many, tally.first, exhaustive=exhaustive
    )


def _measure_exhaustive(
    op: Any, calls: list[Call], dtype: torch.dtype, data: set[int], tally: _Tally
) -> bool:
    """Every value of a 16-bit type through the first call that has one such input (whose
    result has as many elements: a pointwise use); whether it ran."""
    for call in calls:
        every = _exhaustive(call, data, dtype)
        if every is None:
            continue
        got = run_quietly(op, *tree_map(_fresh, (every.args, every.kwargs)))
        if got is None:
            continue
        floats = _floats(got)
        if len(floats) != 1 or floats[0].numel() != 1 << 16:
            return False
        wide = run_quietly(op, *wide_args(every.args, every.kwargs, data, floats[0].dtype))
        wide_floats = _floats(wide or [])
        if len(wide_floats) != 1 or wide_floats[0].shape != floats[0].shape:
            return False
        tally.add(floats[0], wide_floats[0], call)
        return True
    return False


def _measure_refilled(
    op: Any, calls: list[Call], dtype: torch.dtype, data: set[int], g: torch.Generator, tally
) -> None:
    per_call = max(1, TARGET_ELEMENTS // len(calls))
    for call in calls:
        done, variant = 0, call
        for refill in range(MAX_REFILLS + 1):
            if refill:
                variant = _refilled(call, data, dtype, g)
            got = run_quietly(op, *tree_map(_fresh, (variant.args, variant.kwargs)))
            floats = _floats(got or [])
            if got is None or not floats:
                if refill == 0:
                    break  # the sample itself does not run, or gives no float: nothing to refill
                continue
            wide = run_quietly(op, *wide_args(variant.args, variant.kwargs, data, floats[0].dtype))
            if wide is None or len(wide) != len(got):
                continue
            for a, e in zip(got, wide, strict=True):
                if not (isinstance(a, torch.Tensor) and a.dtype in FLOATS):
                    continue
                if not isinstance(e, torch.Tensor) or e.shape != a.shape:
                    continue
                tally.add(a, e, call)
                done += a.numel()
            if done >= per_call or not data:
                break


def _accumulated(op: Any, call: Call, data: set[int]) -> int:
    """The most elements of one data operand that one result element depends on (autograd:
    the nonzero entries of a Jacobian row), over the first, middle and last result element; 0
    where it cannot be told (no gradient: integer or non-differentiable ops)."""
    leaves: list[torch.Tensor] = []

    def tensor(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            leaves.append(x.detach().to(torch.float64).requires_grad_())
            return leaves[-1].clone()  # a non-leaf: in-place overloads may write it
        return x

    def leaf(i: int, x: Any) -> Any:
        if i not in data:
            return x
        if isinstance(x, list | tuple):  # a TensorList (`_foreach_norm`): each is an operand
            return type(x)(tensor(t) for t in x)
        return tensor(x)

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
                    # NaN entries are 0 * NaN (a NaN result of another element), no dependence
                    counts = [int((g.nan_to_num(0.0) != 0).sum()) for g in grads if g is not None]
                    most = max([most, *counts])
            return most
    except Exception:  # noqa: BLE001 - no gradient to tell by: the values' evidence stands
        return 0
