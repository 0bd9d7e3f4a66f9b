"""The values axis: samples with the inputs that break kernels.

- `special`: NaN, +-inf, -0.0, subnormals and dtype extremes (integers: min, max, ...) in
  every data operand, so that e.g. a `where` or `relu` turning NaN into 0 is seen. Extremes only
  go to elementwise arithmetic (see `_elementwise`): in a reduction float overflow depends on the
  summation order, which no two kernels need to share, and an integer that is a count or a
  degree would hang the CPU reference.
- `promotion`: an operand of another dtype: float with an integer tensor (or scalar), integer
  with a float tensor, scalar or 0-dim CPU tensor, bool with int, a wider float.

OpInfo's reference inputs supply such samples where the OpInfo has them (captured by
`opinfo.py` as kinds "special" and "promotion"); the rest are generated here from the op's
ordinary samples. Which operands are data is read from the schema (not index, mask, dim, ...).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from conformance.engine.calls import Call
from conformance.engine.operands import NOT_DATA, data_args, kind  # noqa: F401 - also from here
from conformance.engine.poison import out_like
from conformance.ops import spec_for
from conformance.samples import cpu_survivors
from conformance.samples.twins import _is_out, functional_of, schema_of

VALUE_SETS = ("special", "promotion")
# Added to a floating operand of another dtype: not integral (a result truncated to an integer
# type shows) and not representable in any binary float (a device that rounds a float64 operand
# to the case's float16 before computing, where CPU does not, shows).
THIRD = 1 / 3
MAX_BASES = 3  # ordinary samples each value set is built from
# operand names of ops that broadcast them (TensorIterator ops): a 0-dim tensor is legal there,
# e.g. a backward op's `output` must have the gradient's shape instead
BROADCAST_OPERANDS = frozenset({"other", "exponent", "value", "end"})


def applies(overload: str, dtype: torch.dtype, values: str) -> bool:
    """Whether the value set can say anything about (overload, dtype): decided from the schema,
    without samples (collection stays cheap)."""
    schema = schema_of(overload)
    if schema is None:
        return False
    operands = data_args(schema)
    tensors = [a for _, a in operands if kind(a) != "scalar"]
    if values == "special":
        return dtype != torch.bool and bool(tensors)
    if values == "promotion":
        lists = any(kind(a) == "tensors" for a in tensors)
        return bool(tensors) and (len(operands) >= 2 or lists)
    if values == "reference":
        return bool(tensors)
    raise ValueError(f"unknown value set {values!r}; valid: {', '.join(VALUE_SETS)}")


# ---- special values -------------------------------------------------------------------------
def special_pattern(dtype: torch.dtype, extremes: bool) -> torch.Tensor:
    """The special values of `dtype`, as a 1-D tensor of that dtype."""
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        sub = info.tiny / 4  # subnormal (flushed to zero by kernels that flush denormals)
        values = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, sub, -sub, info.tiny]
        values += [1.0, -1.0, 0.5, -2.0, 3.0, info.eps]
        if extremes:
            values += [info.max, info.min]
        return torch.tensor(values, dtype=torch.float64).to(dtype)
    if dtype.is_complex:
        return special_pattern(torch.float32 if dtype == torch.complex64 else torch.float64, False)
    info = torch.iinfo(dtype)
    # extremes first (small tensors see them); no -1: INT_MIN / -1 traps (SIGFPE) in CPU kernels
    values = [info.min, info.max] if extremes else []
    values += [0, 1, 2, 3, 5] + ([-2, -7] if info.min < 0 else [])
    values += [info.max - 1, info.min + 1] if extremes else []
    return torch.tensor(values, dtype=torch.int64).to(dtype)


def _fill(t: torch.Tensor, pattern: torch.Tensor, operand: int) -> torch.Tensor:
    """`t`'s shape filled from `pattern`: operand 0 cycles fastest, operand 1 by blocks, so two
    operands of n^2 elements meet in every pair of special values. A block longer than the
    tensor is its first value throughout (each tensor of a list is an operand: n**20 would
    overflow a tensor division)."""
    n = pattern.numel()
    i = torch.arange(t.numel())
    block = n**operand
    pick = (i // block) % n if block <= max(t.numel(), 1) else torch.zeros_like(i)
    values = pattern[pick].reshape(t.shape)
    return values.to(t.dtype) if t.dtype.is_complex else values


def _elementwise(call: Call, dtype: torch.dtype) -> bool:
    """Whether the op is elementwise arithmetic on `dtype` (CPU run of the call): its output is
    as large as its largest input and, for integers, of that dtype (or bool). Only there do
    extremes go in: in a reduction float overflow depends on the order of summation, and an
    integer that becomes a count (a polynomial's degree, bincount's size) would hang or exhaust
    memory rather than test a kernel."""
    op = _resolve(call.overload)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = op(*_clone(call.args), **_clone(call.kwargs))
    except Exception:
        return False
    outs = [r for r in (result if isinstance(result, tuple | list) else [result])]
    outs = [r for r in outs if isinstance(r, torch.Tensor)]
    biggest = max((t.numel() for t in call.tensors()), default=0)
    if dtype.is_floating_point or dtype.is_complex:
        return any(r.numel() >= biggest for r in outs)
    return any(r.numel() >= biggest and r.dtype in (dtype, torch.bool) for r in outs)


def special_calls(calls: list[Call], dtype: torch.dtype) -> list[Call]:
    """Ordinary calls with every data tensor of `dtype` filled with special values."""
    if dtype == torch.bool:
        return []  # no special values
    out = []
    for call in calls[:MAX_BASES]:
        schema = schema_of(call.overload)
        operands = data_args(schema)
        positions = {i for i, a in operands if kind(a) != "scalar"}
        names = {a.name for _, a in operands if kind(a) != "scalar"}
        filler = _Filler(special_pattern(dtype, extremes=_elementwise(call, dtype)), dtype)
        args = tuple(filler(a) if i in positions else a for i, a in enumerate(call.args))
        kwargs = {k: filler(v) if k in names else v for k, v in call.kwargs.items()}
        if filler.operand:
            out.append(Call(call.overload, args, kwargs, cpu_args=call.cpu_args))
    return cpu_survivors.survivors(out, _run_on_cpu)


def _run_on_cpu(call: Call) -> object:
    """What the runner will do with `call` on CPU: the spec's reference, else the op, and for
    out= overloads also the functional form (promotion re-makes out from it)."""
    outs = {a.name for a in schema_of(call.overload).arguments if _is_out(a)}
    # only for out= forms: a functional overload's "sibling" may take other argument types
    # (all.dim's int dim is not all.dims' int[]), and asking it refused every sized all.dim
    functional = functional_of(call.overload) if outs else None
    if functional is not None:
        functional(*call.args, **{k: v for k, v in call.kwargs.items() if k not in outs})
    reference = spec_for(call.overload).reference or _resolve(call.overload)
    return reference(*call.args, **call.kwargs)


class _Filler:
    """Fills successive data tensors of the dtype with the pattern (operand 0, 1, ...)."""

    def __init__(self, pattern: torch.Tensor, dtype: torch.dtype) -> None:
        self.pattern = pattern
        self.dtype = dtype
        self.operand = 0

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(self(v) for v in value)
        if isinstance(value, torch.Tensor) and value.dtype == self.dtype and value.numel():
            filled = _fill(value, self.pattern, self.operand)
            self.operand += 1
            return filled
        return value


# ---- type promotion -------------------------------------------------------------------------
def _others(dtype: torch.dtype) -> list[tuple[torch.dtype, bool]]:
    """(dtype of the other operand, as a 0-dim CPU tensor) for a case of `dtype`."""
    if dtype == torch.bool:
        return [(torch.int64, False), (torch.float32, False)]
    if dtype.is_floating_point:
        wider = torch.float64 if dtype != torch.float64 else torch.float32
        return [(torch.int64, False), (torch.bool, False), (wider, False), (torch.float64, True)]
    wider = torch.int64 if dtype != torch.int64 else torch.int32
    return [(torch.float32, False), (torch.float64, True), (wider, False), (torch.bool, False)]


def _as(value: Any, dtype: torch.dtype, zero_dim: bool) -> Any:
    """`value` (the other operand) converted to `dtype`, keeping tensor or number form."""
    if isinstance(value, torch.Tensor):
        t = value.reshape(-1)[:1].reshape(()) if zero_dim else value
        t = t.to(torch.float64)
        if dtype.is_floating_point:
            t = t + THIRD
        return t.to(dtype)
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value) + THIRD
    return int(value) if math.isfinite(value) else None


def promotion_calls(calls: list[Call], dtype: torch.dtype) -> list[Call]:
    """Ordinary calls with the second data operand of another dtype (tensor, number or 0-dim
    CPU tensor); out= arguments re-made in the result dtype."""
    out = []
    for call in calls[:MAX_BASES]:
        schema = schema_of(call.overload)
        slots = _slots(schema, call)
        if len(slots) < 2:
            continue
        pos, element, arg_kind = slots[1]
        arg_name = schema.arguments[pos].name if arg_kind == "tensor" else ""
        for other, zero_dim in _others(dtype):
            value = call.args[pos] if element is None else call.args[pos][element]
            if zero_dim and (
                arg_name not in BROADCAST_OPERANDS
                or element is not None
                or not isinstance(value, torch.Tensor)
                or value.numel() == 0
            ):
                continue  # only operands that broadcast take a 0-dim (CPU) tensor
            if isinstance(value, bool | int | float) and other == torch.bool:
                continue  # a bool scalar says nothing new
            args = list(call.args)
            converted = _as(value, other, zero_dim)
            if converted is None:
                continue
            if element is None:
                args[pos] = converted
            else:
                args[pos] = [converted if j == element else v for j, v in enumerate(args[pos])]
            cpu = call.cpu_args | ({pos} if zero_dim else set())
            if not _device_tensors(args, call.kwargs, cpu):
                continue  # every tensor on CPU: the call would never reach the device
            out.append(Call(call.overload, tuple(args), call.kwargs, cpu_args=frozenset(cpu)))
    remade = []
    for call in cpu_survivors.survivors(out, _run_on_cpu):
        kwargs = _remade_outs(call.overload, list(call.args), call.kwargs)
        if kwargs is not None:
            remade.append(Call(call.overload, call.args, kwargs, cpu_args=call.cpu_args))
    return remade


def _device_tensors(args: list, kwargs: dict, cpu: set[int]) -> int:
    """How many tensors of the call are placed on the device (positions in `cpu` stay on CPU)."""
    leaves = [a for i, a in enumerate(args) if i not in cpu]
    leaves += [v for a in leaves if isinstance(a, list | tuple) for v in a]
    leaves += list(kwargs.values())
    return sum(isinstance(x, torch.Tensor) for x in leaves)


def _slots(schema: Any, call: Call) -> list[tuple[int, int | None, str]]:
    """(position, list element or None, kind) of each data operand given positionally."""
    slots = []
    for i, a in data_args(schema):
        if i >= len(call.args) or call.args[i] is None:
            continue
        if kind(a) == "tensors":
            slots += [(i, j, "tensor") for j in range(len(call.args[i]))]
        else:
            slots.append((i, None, kind(a)))
    return slots


def remade(call: Call) -> Call | None:
    """`call` with its out= arguments re-made for the functional result of its (new) inputs
    (None: the functional gives no result to shape them by)."""
    kwargs = _remade_outs(call.overload, list(call.args), call.kwargs)
    return None if kwargs is None else Call(call.overload, call.args, kwargs, call.cpu_args)


def _remade_outs(overload: str, args: list, kwargs: dict) -> dict | None:
    """kwargs with the out= tensors in the dtype of the functional result (None: no result)."""
    schema = schema_of(overload)
    outs = [a.name for a in schema.arguments if _is_out(a) and a.name in kwargs]
    if not outs:
        return dict(kwargs)
    functional = functional_of(overload)
    if functional is None:
        return dict(kwargs)
    inputs = {k: v for k, v in kwargs.items() if k not in outs}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = functional(*_clone(tuple(args)), **_clone(inputs))
    except Exception:
        return dict(kwargs)  # CPU refuses the mix: the device must refuse it too
    results = list(result) if isinstance(result, tuple | list) else [result]
    if len(results) != len(outs):
        return dict(kwargs)
    return {**inputs, **{k: out_like(r) for k, r in zip(outs, results, strict=True)}}


def _clone(tree: Any) -> Any:
    from conformance.engine.calls import clone_tree

    return clone_tree(tree)


def _resolve(overload: str):
    from conformance.engine.discovery import resolve

    return resolve(overload)
