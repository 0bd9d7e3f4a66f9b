"""The `arguments` value set: every value class of every schema argument, reached.

OpInfo's samples use few argument values: every captured `nll_loss_forward` sample has
reduction = none, so a weighted mean divided by the batch size instead of the total weight
passes every case. For each argument of an overload's schema this module names its value
classes (`classes`):

- bool: True and False (an optional bool also None);
- `reduction`: none, mean and sum;
- dims (`dim`, `dims`): negative, non-negative, several (a list type), None (an optional one);
- `ignore_index`: hit (some target element is it) and missed;
- an optional tensor: present and absent;
- an optional number: None and set; an optional dtype: None and set (a wider one);
- a memory format: None, contiguous, preserve and channels_last;
- strings with a known domain (`approximate`, `rounding_mode`, `reduce`, `side`, ...) and the
  norm orders of `linalg_vector_norm`: each value.

It measures which classes the ordinary samples reach (`account`) and makes each missing one by
changing that argument of an ordinary sample (`derived_calls`): kept only where CPU accepts the
call (it neither raises nor crashes: cpu_survivors.py), with out= arguments re-made for the new
result. A class that no change of any sample makes is left out, with the reason (CPU's error).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from conformance.engine.calls import Call
from conformance.engine.operands import NOT_DATA
from conformance.engine.siblings import _is_out, schema_of
from conformance.samples import cpu_survivors, values

MAX_DERIVED = 12  # derived calls per (overload, dtype): one per missing class, at most
BASES_TRIED = 3  # ordinary samples a class may be derived from
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}
DIMS = ("dim", "dims")
# strings whose domain torch documents, by argument name (and op, where it differs)
STRINGS: dict[str, tuple[str | None, ...]] = {
    "approximate": ("none", "tanh"),
    "rounding_mode": (None, "trunc", "floor"),
    "side": ("left", "right"),
    "interpolation": ("linear", "lower", "higher", "midpoint", "nearest"),
    "scatter_reduce.reduce": ("sum", "prod", "mean", "amax", "amin"),
    "index_reduce.reduce": ("prod", "mean", "amax", "amin"),
    "scatter.reduce": ("add", "multiply"),
}
# numbers that select an algorithm, by op and argument name
NUMBERS: dict[str, tuple[float, ...]] = {
    "linalg_vector_norm.ord": (0, 1, 2, math.inf, -math.inf, 3),
    "norm.p": (0, 1, 2, math.inf, 3),
}
MEMORY_FORMATS = (None, "contiguous_format", "preserve_format", "channels_last")
SKIPPED_TYPES = ("Layout", "Device", "Generator")  # options a case cannot vary on CPU
WIDER = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
    torch.int32: torch.int64,
    torch.bool: torch.int64,
}


@dataclass(frozen=True)
class ArgClass:
    """One value class of one argument: `label` reads `reduction=mean`, `dim=negative`."""

    arg: str
    value: str

    @property
    def label(self) -> str:
        return f"{self.arg}={self.value}"


def _type_text(arg: Any) -> str:
    """The argument's type as the schema writes it (`real_type`: ScalarType, Layout and
    MemoryFormat are ints to TorchScript)."""
    return str(getattr(arg, "real_type", arg.type))


def _optional(arg: Any) -> bool:
    return isinstance(arg.type, torch.OptionalType)


def _inner(arg: Any) -> Any:
    t = arg.type
    return t.getElementType() if isinstance(t, torch.OptionalType) else t


def _op(overload: str) -> str:
    return overload.split(".")[0].rstrip("_")


def _values_of(arg: Any, overload: str) -> list[str] | None:
    """The classes of one argument (None: an argument without classes)."""
    inner, text = _inner(arg), _type_text(arg)
    if any(s in text for s in SKIPPED_TYPES) or _is_out(arg):
        return None
    name = arg.name
    none = ["None"] if _optional(arg) else []
    if isinstance(inner, torch.BoolType):
        return (["True", "False"] + none) if name != "pin_memory" else None
    if name == "reduction" and isinstance(inner, torch.IntType):
        return list(REDUCTIONS.values())
    if name == "ignore_index":
        return ["hit", "missed"]
    if name in DIMS and ("int" in text.lower()):
        several = ["several"] if isinstance(inner, torch.ListType) else []
        return ["negative", "non-negative", *several, *none]
    numbers = NUMBERS.get(f"{_op(overload)}.{name}")
    if numbers is not None:
        return [_number_label(v) for v in numbers]
    strings = STRINGS.get(f"{_op(overload)}.{name}", STRINGS.get(name))
    if strings is not None and "str" in text:
        return [str(s) for s in strings]
    if "MemoryFormat" in text:
        return [str(m) for m in MEMORY_FORMATS]
    if not _optional(arg):
        return None
    if isinstance(inner, torch.TensorType):
        return ["present", "absent"]
    if "ScalarType" in text:
        return ["None", "set"]
    if isinstance(inner, torch.NumberType | torch.FloatType | torch.IntType):
        return ["None", "set"]
    return None


def _number_label(v: float) -> str:
    return str(int(v)) if math.isfinite(v) and v == int(v) else str(v)


def classes(overload: str) -> list[ArgClass]:
    """Every value class of every argument of the overload's schema."""
    schema = schema_of(overload)
    if schema is None:
        return []
    out = []
    for arg in schema.arguments:
        for value in _values_of(arg, overload) or ():
            out.append(ArgClass(arg.name, value))
    return out


def applies(overload: str, dtype: torch.dtype) -> bool:
    """Whether the schema has arguments with value classes at all (the samples decide the
    rest: a case only exists where a class is missing and could be made)."""
    return bool(classes(overload))


# ---- reading a call ------------------------------------------------------------------------
_ABSENT = object()


def _argument(call: Call, schema: Any, name: str) -> Any:
    """The call's value of argument `name` (positional, keyword or default; _ABSENT if none)."""
    for i, arg in enumerate(schema.arguments):
        if arg.name != name:
            continue
        if name in call.kwargs:
            return call.kwargs[name]
        if i < len(call.args) and not arg.kwarg_only:
            return call.args[i]
        return arg.default_value if arg.has_default_value() else _ABSENT
    return _ABSENT


def _self(call: Call) -> torch.Tensor | None:
    for x in call.args:
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(x, list | tuple) and x and isinstance(x[0], torch.Tensor):
            return x[0]
    return None


def _rank(call: Call) -> int:
    t = _self(call)
    return t.dim() if t is not None else 0


def reached(call: Call, overload: str) -> set[str]:
    """The class labels the call's arguments belong to."""
    schema = schema_of(overload)
    found: set[str] = set()
    if schema is None:
        return found
    for arg in schema.arguments:
        values = _values_of(arg, overload)
        if not values:
            continue
        v = _argument(call, schema, arg.name)
        if v is _ABSENT:
            continue
        found |= {f"{arg.name}={c}" for c in _class_of(arg, v, call, schema, values)}
    return found


def _class_of(arg: Any, v: Any, call: Call, schema: Any, values: list[str]) -> set[str]:
    name = arg.name
    if v is None:
        return {"None"} if "None" in values else {"absent"} if "absent" in values else set()
    if "present" in values:
        return {"present"}
    if name == "reduction":
        return {REDUCTIONS.get(int(v), str(v))}
    if name == "ignore_index":
        target = _argument(call, schema, "target")
        if isinstance(target, torch.Tensor):
            return {"hit" if bool((target == int(v)).any()) else "missed"}
        return set()
    if "negative" in values:
        dims = list(v) if isinstance(v, list | tuple) else [v]
        out = {"negative" if any(d < 0 for d in dims) else "non-negative"} if dims else set()
        return out | ({"several"} if len(dims) > 1 else set())
    if isinstance(v, bool):
        return {str(v)}
    if isinstance(v, torch.memory_format):
        return {str(v).removeprefix("torch.")}
    if isinstance(v, torch.dtype):
        return {"set"}
    if isinstance(v, int | float) and "set" in values:
        return {"set"}
    if isinstance(v, int | float):
        return {_number_label(float(v))}
    return {str(v)}


def account(overload: str, calls: list[Call]) -> dict[str, str]:
    """{class label: "ordinary"} for the classes the calls reach, "" for the others."""
    hit: set[str] = set()
    for call in calls:
        hit |= reached(call, overload)
    return {c.label: ("ordinary" if c.label in hit else "") for c in classes(overload)}


# ---- making a missing class ----------------------------------------------------------------
def _with(call: Call, schema: Any, name: str, value: Any) -> Call:
    """`call` with argument `name` set to `value` (later positional ones stay positional)."""
    args, kwargs = list(call.args), dict(call.kwargs)
    for i, arg in enumerate(schema.arguments):
        if arg.name != name:
            continue
        if arg.kwarg_only or name in kwargs:
            kwargs[name] = value
        elif i < len(args):
            args[i] = value
        else:  # the positions up to it take their defaults
            for j in range(len(args), i):
                a = schema.arguments[j]
                if not a.has_default_value():
                    kwargs[name] = value
                    break
                args.append(a.default_value)
            else:
                args.append(value)
        break
    return Call(call.overload, tuple(args), kwargs, cpu_args=call.cpu_args)


def _candidates(cls: ArgClass, call: Call, schema: Any, dtype: torch.dtype) -> Iterator[Any]:
    """Values of the argument that put the call in the class (tried in order)."""
    arg = next(a for a in schema.arguments if a.name == cls.arg)
    v, rank, value = _argument(call, schema, cls.arg), _rank(call), cls.value
    if value == "None":
        yield None
    elif value in ("True", "False"):
        yield value == "True"
    elif cls.arg == "reduction":
        yield next(k for k, n in REDUCTIONS.items() if n == value)
    elif cls.arg == "ignore_index":
        target = _argument(call, schema, "target")
        if not isinstance(target, torch.Tensor) or not target.numel():
            return
        present = set(target.reshape(-1).tolist())
        yield int(target.reshape(-1)[0]) if value == "hit" else min([-100, *present]) - 1
    elif value in ("negative", "non-negative", "several"):
        yield from _dims(value, v, rank, isinstance(_inner(arg), torch.ListType))
    elif value == "absent":
        yield None
    elif value == "present":
        yield from _present(cls.arg, call, dtype)
    elif value == "set":
        yield from _set_value(arg, dtype)
    elif "MemoryFormat" in _type_text(arg):
        yield getattr(torch, value)
    elif f"{_op(call.overload)}.{cls.arg}" in NUMBERS:
        yield float(value) if not value.lstrip("-").isdigit() else int(value)
    else:
        yield value


def _dims(value: str, v: Any, rank: int, is_list: bool) -> Iterator[Any]:
    size = max(rank, 1)
    given = list(v) if isinstance(v, list | tuple) else [] if v in (None, _ABSENT) else [v]
    given = given or [-1]
    if value == "several":
        if rank >= 2:
            yield [0, rank - 1]
        return
    wrapped = [d % size - size if value == "negative" else d % size for d in given]
    yield wrapped if is_list else wrapped[0]


def _present(name: str, call: Call, dtype: torch.dtype) -> Iterator[Any]:
    """Tensors for an absent optional one: shapes a per-channel, per-feature or elementwise
    operand has (CPU decides which the op takes); positive values (a variance, a weight)."""
    if name in NOT_DATA:
        return
    self = _self(call)
    if self is None:
        return
    shapes = []
    if self.dim() >= 2:
        shapes.append((self.shape[1],))
    if self.dim() >= 1:
        shapes += [(self.shape[-1],), tuple(self.shape)]
    shapes.append(())
    g = torch.Generator().manual_seed(7)
    kind = dtype if dtype.is_floating_point or dtype.is_complex else torch.float32
    for shape in dict.fromkeys(shapes):
        yield (torch.rand(shape, generator=g, dtype=torch.float64) + 0.5).to(kind)


def _set_value(arg: Any, dtype: torch.dtype) -> Iterator[Any]:
    text = _type_text(arg)
    if "ScalarType" in text:
        yield WIDER.get(dtype, dtype)
    elif "int" in text.lower() and "float" not in text.lower() and "Scalar" not in text:
        yield 1
    else:
        yield 0.5
        yield 1


def derived_calls(overload: str, dtype: torch.dtype, ordinary: list[Call]) -> list[Call]:
    """One call per class the ordinary calls miss, made from one of them (kept where CPU
    accepts it)."""
    return [c for c in derive(overload, dtype, ordinary).values() if isinstance(c, Call)]


def derive(overload: str, dtype: torch.dtype, ordinary: list[Call]) -> dict[str, Call | str]:
    """{missing class label: its call, or why it is left out}."""
    schema = schema_of(overload)
    found = account(overload, ordinary)
    missing = [c for c in classes(overload) if not found.get(c.label)]
    out: dict[str, Call | str] = {}
    if schema is None or not missing:
        return out
    # the richest samples first (optional tensors present): a class is made where it meets
    # the most of the op (a mean reduction with a weight, not without)
    usable = [c for c in ordinary if not c.cpu_args] or ordinary
    bases = sorted(usable, key=lambda c: -_present_count(c))[:BASES_TRIED]
    for cls in missing[:MAX_DERIVED]:
        tried, why = (
            [],
            "no sample can take it"
            + (" (several dims need a sample of two)" if cls.value == "several" else ""),
        )
        for base in bases:
            for value in _candidates(cls, base, schema, dtype):
                tried.append(_with(base, schema, cls.arg, value))
        tried = [c for c in tried if cls.label in reached(c, overload)]
        # CPU may crash on a new argument value: the first run of each is in a forked child
        survived = cpu_survivors.survivors(tried, _run) if tried else []
        for call in (c for c in map(values.remade, survived) if c is not None):
            error = _cpu_error(call)
            if error is None:
                out[cls.label] = call
                break
            why = f"cpu rejects it: {error}"
        else:
            if tried and why.startswith("no sample can take it"):
                why = "cpu crashes or hangs on it"
        out.setdefault(cls.label, why)
    return out


def _present_count(call: Call) -> int:
    leaves = [*call.args, *call.kwargs.values()]
    return sum(isinstance(x, torch.Tensor) for x in leaves)


def _run(call: Call) -> object:
    from conformance.samples.values import _run_on_cpu

    return _run_on_cpu(call)


def _cpu_error(call: Call) -> str | None:
    """CPU's error for the call, in one line (None: CPU computes it)."""
    from conformance.engine.calls import clone_tree

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run(Call(call.overload, clone_tree(call.args), clone_tree(call.kwargs)))
    except Exception as exc:  # noqa: BLE001 - the reason a class is left out
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0][:120] if text else ''}"
    return None
