"""Whether CPU's result for an (overload, dtype) is exact, and the rule its last bits are judged by.

"Close within a tolerance" is right where CPU itself is not correctly rounded (exp in float32,
softmax, matmul, reductions). It is wrong where the result is exact: a single IEEE operation
(add, mul, div, sqrt), a conversion, and every data-movement or selection op (copy, cat, index,
where, masked_fill, flip, max values, views). There the last bit is part of the answer, and the
`rounding` check (engine/bits.py) judges it by one of two rules (`Exactness.rule`):

- `BITS`: per element CPU's bits or the correctly rounded bits (the op on the inputs in float64,
  rounded once);
- `ULP`: per element CPU's bits or at most one ulp from the correctly rounded result.

Which rule, if any, is decided by evidence and by what IEEE 754 asks of the op
(engine/ieee.py). The evidence is CPU's results against the float64 result rounded once
(`Measured`; `exactness_measure.py` measures it, from the float64 run of `wide_args`).

`judge` decides per dtype, from the measurement and the op's IEEE kind:

- every element correctly rounded, for ops whose result IEEE requires or defines: `BITS`;
- some elements not correctly rounded, each at most one ulp off, for a single IEEE arithmetic
  operation (float32 sqrt on an AVX-512 CPU, about 17 % of elements): `BITS` still, since IEEE
  requires correct rounding; CPU's bits are accepted too;
- the functions IEEE only recommends correct rounding for (exp, log, sin, pow, hypot, erf,
  lgamma, ...): in float16 and bfloat16, where CPU is correctly rounded on every element,
  `ULP` (computed in float32 and rounded once, as CPU and CUDA do, a result is correctly
  rounded or an ulp off); in float32 and float64 never a claim: devices document error bounds
  of a few ulps for them (CUDA's float32: log10 2, tan 4, lgamma 6 and more near its zeros), and
  an H200 held to 1 ulp failed log10 and lgamma while it met its own specification. The
  tolerance judges them, as PyTorch's test_compare_cpu does;
- otherwise no claim: the tolerance judges.

float32, float16, bfloat16 and the integer dtypes (whose float results, e.g. true division, are
judged the same way) are measured on their own; float64 has no wider type and is inferred from
float32 (where float32 is exact, or for a correctly rounded operation with a float64 reference
of its own: `FLOAT64_REFERENCES`). An op that accumulates (a result element depends on more
than one element of one input: cumsum, norms, losses, matmul) is not exact even where CPU's
result is correctly rounded: CPU accumulates some in double (cumsum, vector_norm), a device in
float32 with another order, and both are right. An op spec can declare exactness
(`OpSpec.exact`: conversions, whose result IEEE defines).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import ieee

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # floating results judged
BITS = "bits"  # CPU's bits or the correctly rounded ones, element by element
ULP = "ulp"  # CPU's bits or at most one ulp from the correctly rounded result
HALF = (torch.float16, torch.bfloat16)  # where a recommended function is held to one ulp
_INT_BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


@dataclass(frozen=True)
class Exactness:
    """The verdict on CPU's results for one (overload, dtype)."""

    exact: bool  # a last-bit rule applies (`rule`)
    elements: int  # result elements compared
    why: str  # how it was decided (a difference found, too few elements, declared, inferred)
    rule: str = BITS  # BITS or ULP (meaningful where `exact`)
    dtype: str = ""  # the case dtype the verdict is for (float64 results of another say nothing)

    def to_json(self) -> list:
        return [self.exact, self.elements, self.why, self.rule]

    @classmethod
    def from_json(cls, value: list) -> Exactness:
        rule = str(value[3]) if len(value) > 3 else BITS
        return cls(bool(value[0]), int(value[1]), str(value[2]), rule)


@dataclass(frozen=True)
class Measured:
    """What `measure` found of CPU's results for one (overload, dtype)."""

    elements: int  # floating result elements compared
    wrong: int = 0  # of them not the correctly rounded value
    ulps: int = 0  # the largest ulp distance of those (1 << 62: NaN against a number)
    accumulates: int = 0  # > 1: a result element depends on that many elements of one input
    first: str = ""  # the first element not correctly rounded, and its sample
    failed: str = ""  # why nothing could be measured
    exhaustive: bool = False  # every value of a 16-bit type was run

    def to_json(self) -> list:
        return [
            self.elements,
            self.wrong,
            self.ulps,
            self.accumulates,
            self.first,
            self.failed,
            self.exhaustive,
        ]

    @classmethod
    def from_json(cls, value: list) -> Measured:
        e, w, u, a, first, failed, exhaustive = value
        return cls(int(e), int(w), int(u), int(a), str(first), str(failed), bool(exhaustive))

    def describe(self) -> str:
        """The evidence in words (the rounding check's messages quote it)."""
        over = "all 65536 values of the type" if self.exhaustive else f"{self.elements} elements"
        if not self.wrong:
            return f"correctly rounded on {over}"
        share = 100 * self.wrong / max(self.elements, 1)
        return (
            f"not correctly rounded on {self.wrong} of {over} ({share:.2g} %, "
            f"{_ulps_text(self.ulps)}): {self.first}"
        )


def _ulps_text(ulps: int) -> str:
    if ulps >= 1 << 62:
        return "NaN where a number is due"
    return "1 ulp" if ulps == 1 else f"up to {ulps} ulps"


def magnitudes(t: torch.Tensor) -> torch.Tensor:
    """|t| of a tensor of FLOATS as integers in the order of the magnitudes: its bits with the
    sign cleared (inf above every finite value, NaN above inf)."""
    ints = _INT_BITS[t.dtype]
    return t.resolve_neg().contiguous().view(ints) & torch.iinfo(ints).max


def ordered(t: torch.Tensor) -> torch.Tensor:
    """The floats of `t` as integers in the order of their values (adjacent floats differ by
    1: the ulp distance is a difference)."""
    magnitude = magnitudes(t).to(torch.int64)
    return torch.where(t.signbit(), -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise ulp distance of two tensors of one floating dtype (inf is one ulp past the
    largest finite value; NaN against anything but NaN is 1 << 62)."""
    d = (ordered(a) - ordered(b)).abs()
    nan = a.isnan() | b.isnan()
    return torch.where(nan, torch.where(a.isnan() & b.isnan(), 0, 1 << 62), d)


_WIDE_DTYPES = {
    **{d: torch.float64 for d in (torch.float16, torch.bfloat16, torch.float32)},
    **{d: torch.complex128 for d in (torch.complex32, torch.complex64)},
}


def wide_args(args: tuple, kwargs: dict, data: set[int], result: torch.dtype) -> tuple:
    """(args, kwargs) for the float64 reference run: floating tensors upcast; integer and bool
    tensors among the data operands (positions in `data`) converted to the `result` dtype first,
    as type promotion does, then upcast; a floating dtype argument (`dtype=` of linspace,
    cumsum, sum, softmax ...) becomes float64 (complex: complex128), or the run would compute
    in the narrow dtype and measure CPU against itself. Tensors elsewhere (indices, masks)
    unchanged."""

    def up(x: Any, data_operand: bool) -> Any:
        if isinstance(x, torch.dtype):  # dtype= asks for the result (and its arithmetic) in it
            return _WIDE_DTYPES.get(x, x)
        if not isinstance(x, torch.Tensor):
            return x
        if x.is_floating_point():
            return x.to(torch.float64)
        if data_operand and not x.is_complex():
            return x.to(result).to(torch.float64)
        return x

    wide = tuple(tree_map(lambda x, d=i in data: up(x, d), a) for i, a in enumerate(args))
    return wide, tree_map(lambda x: up(x, False), kwargs)


def run_quietly(op: Any, args: tuple, kwargs: dict) -> list[Any] | None:
    """The flat result of `op` on CPU, warnings silenced; None where it raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a sample the refilled values do not suit: skipped
        return None
    return tree_flatten(result)[0]


def _np():
    import numpy

    return numpy


#: float64 has no wider type: where CPU's float64 result is not correctly rounded, the correctly
#: rounded one of these ops comes from here, by the op's base name (numpy's sqrt is the
#: processor's IEEE square root; torch's float64 sqrt is one ulp off on about 1 % of elements
#: on an AVX-512 CPU). Their float64 cases are judged by `BITS` against it.
FLOAT64_REFERENCES = {"sqrt": lambda x: torch.from_numpy(_np().sqrt(x.detach().numpy()))}


def judge(
    kind: str,
    own: Measured | None,
    float32: Measured | None,
    dtype: torch.dtype,
    overload: str = "",
) -> Exactness:
    """The verdict for `dtype` (see the module docstring): `own` is the dtype's measurement,
    `float32` float32's (float64 is inferred from it); `kind` the op's IEEE kind."""
    if dtype == torch.float64:
        return _inferred(kind, float32, ieee.base(overload))
    m = own if dtype != torch.float32 else float32
    if m is None:
        return Exactness(False, 0, "not measured")
    if m.failed:
        return Exactness(False, m.elements, m.failed)
    if m.accumulates > 1:
        return Exactness(
            False,
            m.elements,
            f"accumulates: a result element depends on {m.accumulates} elements of one input; "
            "the order and width of the sum are the device's",
        )
    if kind == ieee.RECOMMENDED:
        if dtype in HALF and not m.wrong:
            return Exactness(
                True,
                m.elements,
                f"{m.describe()}; IEEE only recommends correct rounding here: within 1 ulp",
                ULP,
            )
        return Exactness(
            False,
            m.elements,
            f"{m.describe()}; IEEE only recommends correct rounding here, and devices document "
            "a few ulps in float32 and float64: the tolerance judges",
        )
    if not m.wrong:
        return Exactness(True, m.elements, m.describe())
    if kind == ieee.CORRECTLY_ROUNDED and m.ulps <= 1:
        return Exactness(
            True,
            m.elements,
            f"IEEE requires correct rounding; cpu is {m.describe()}: cpu's bits or the "
            "correctly rounded ones",
        )
    return Exactness(False, m.elements, m.describe())


def _inferred(kind: str, float32: Measured | None, name: str) -> Exactness:
    if float32 is None:
        return Exactness(False, 0, "float32 not measured")
    judged32 = judge(kind, None, float32, torch.float32)
    if not judged32.exact:
        return Exactness(False, 0, f"float32 is not exact ({judged32.why})")
    if not float32.wrong:
        return Exactness(True, 0, f"float32 is exact ({judged32.why}); float64 inferred")
    if name in FLOAT64_REFERENCES:
        return Exactness(
            True,
            0,
            f"IEEE requires correct rounding (float32: {float32.describe()}); float64 against "
            "the processor's correctly rounded result: cpu's bits or those",
        )
    if kind == ieee.CORRECTLY_ROUNDED and float32.ulps <= 1:
        return Exactness(
            True,
            0,
            f"IEEE requires correct rounding (float32: {float32.describe()}); float64 has no "
            "wider type to find the correctly rounded result: within 1 ulp of cpu's",
            ULP,
        )
    return Exactness(False, 0, "float64 has no wider type to find the correctly rounded result")
