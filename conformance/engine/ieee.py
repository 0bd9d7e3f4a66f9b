"""What IEEE 754 asks of an aten op's floating result: the rule the last bits are judged by.

IEEE 754-2019 requires (clause 5) that the arithmetic operations +, -, *, /, sqrt and
fusedMultiplyAdd, and conversions between formats, be correctly rounded, and defines exactly the
results of the operations that compute nothing new: negate, abs, copySign, minimum and maximum,
roundToIntegral, remainder, scaleB, and every selection or data movement. It only recommends
correct rounding (clause 9.2) for the functions: exp, log, pow, hypot, rSqrt, sin, tanh, ...;
the special functions deep learning adds (erf, sigmoid, gelu, softplus) it does not mention.

`kind(overload)` sorts an overload into one of three, read from torch's `pointwise` tag and the
op's base name (the overload's functional sibling for its in-place and out= forms):

- `CORRECTLY_ROUNDED`: one IEEE arithmetic operation. The device must give CPU's bits or the
  correctly rounded ones, element by element, even where CPU itself is not correctly rounded
  on every element (float32 `sqrt` on an AVX-512 CPU is one ulp off on about 17 % of elements,
  float64 `sqrt` on about 1 %): CPU's bits are a courtesy to a device that reproduces them.
- `EXACT`: an operation whose result IEEE defines exactly, and every op that is not pointwise
  (selections, data movement; those that compute are told apart by measurement: an op that
  accumulates or rounds twice is not exact on CPU, engine/exactness.py). Bit for bit where CPU
  is measured exact.
- `RECOMMENDED`: every other pointwise op (transcendental and special functions). Never demanded
  bit for bit: where CPU is correctly rounded on every measured element, the device is held to
  at most one ulp from the correctly rounded result; elsewhere the tolerance judges it.
"""

from __future__ import annotations

import functools

CORRECTLY_ROUNDED = "correctly-rounded"
EXACT = "exact"
RECOMMENDED = "recommended"

#: single IEEE arithmetic operations (clause 5.4): correctly rounded by requirement
ARITHMETIC = frozenset(
    {"add", "sub", "rsub", "subtract", "mul", "multiply", "div", "divide", "true_divide"}
    | {"reciprocal", "sqrt", "square"}
)
#: pointwise operations whose result IEEE defines exactly (no rounding, or one the format fixes)
DEFINED = frozenset(
    {"neg", "negative", "positive", "abs", "absolute", "copysign", "sign", "sgn", "signbit"}
    | {"floor", "ceil", "trunc", "fix", "round", "frac", "fmod", "remainder", "ldexp"}
    | {"clamp", "clamp_min", "clamp_max", "clip", "minimum", "maximum", "fmin", "fmax"}
    | {"max", "min", "where", "masked_fill", "relu", "relu6", "threshold", "hardtanh"}
    | {"threshold_backward", "hardtanh_backward", "leaky_relu", "prelu", "hardshrink"}
    | {"softshrink", "heaviside", "nan_to_num", "fill", "zero", "zeros_like", "ones_like"}
    | {"full_like", "clone", "copy", "_to_copy", "to", "lift_fresh_copy", "alias", "detach"}
)


def base(overload: str) -> str:
    """'add_.Tensor' -> 'add', '_to_copy' -> '_to_copy' (a leading underscore is kept: it names
    another op; the trailing one of an in-place form is not)."""
    name = overload.split(".")[0]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


@functools.cache
def kind(overload: str) -> str:
    """CORRECTLY_ROUNDED, EXACT or RECOMMENDED (see the module docstring). A `_foreach_*` op
    is its op applied to each tensor of its lists: that op's kind (torch tags none of them
    pointwise, and `_foreach_sin` judged as EXACT was held to the bit on an H200)."""
    name = base(overload)
    if name.startswith(FOREACH):
        return _foreach_kind(name.removeprefix(FOREACH))
    if name in ARITHMETIC:  # (div.Tensor_mode rounds the quotient to an integral value)
        return EXACT if "_mode" in overload.partition(".")[2] else CORRECTLY_ROUNDED
    if name in DEFINED or not pointwise(overload):
        return EXACT
    return RECOMMENDED


FOREACH = "_foreach_"


def _foreach_kind(name: str) -> str:
    """The kind of the op a `_foreach_<name>` applies per tensor (its default overload, or
    its first pointwise one); EXACT (judged by measurement) where aten has no such op."""
    import torch

    packet = getattr(torch.ops.aten, name, None)
    overloads = [f"{name}.{o}" for o in packet.overloads()] if packet is not None else []
    if not overloads:
        return EXACT
    kinds = {kind(o) for o in overloads}
    return next((k for k in (CORRECTLY_ROUNDED, RECOMMENDED) if k in kinds), EXACT)


@functools.cache
def per_tensor_pointwise(overload: str) -> bool:
    """A `_foreach_<op>` whose op is pointwise (any overload of it torch tags so): element k of
    its i-th result depends only on element k of the i-th tensor of each list."""
    import torch

    name = base(overload).removeprefix(FOREACH)
    packet = getattr(torch.ops.aten, name, None)
    if not overload.startswith(FOREACH) or packet is None:
        return False
    return any(pointwise(f"{name}.{o}") for o in packet.overloads())


@functools.cache
def pointwise(overload: str) -> bool:
    """torch's `pointwise` tag on the overload or on its functional sibling."""
    from conformance.engine.discovery import resolve
    from conformance.engine.siblings import functional_of

    try:
        ops = [resolve(overload), functional_of(overload)]
    except (AttributeError, RuntimeError):
        return False
    return any("pointwise" in str(t) for op in ops if op is not None for t in op.tags)


def single_operation(schema: object, args: tuple, kwargs: dict) -> bool:
    """Whether a call is the one operation its kind names: `add` and `sub` with an `alpha`
    other than +-1 are a multiply and an add (two roundings, or one where the kernel fuses
    them: both right), whatever the op's kind."""
    for i, arg in enumerate(schema.arguments):  # type: ignore[attr-defined]
        if arg.name != "alpha":
            continue
        value = kwargs.get("alpha", args[i] if i < len(args) else 1)
        return not isinstance(value, int | float) or value in (1, -1)
    return True
