"""What a mutant needs of an overload's schema: which arguments it writes, whether it returns a
view, a fresh result or what it wrote, which arguments are read-only tensors, its category."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from conformance.engine import oracles

#: op categories of the campaign's table, first match wins (by the op's base name)
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foreach", ("_foreach_", "_fused_")),
    (
        "random",
        (
            "normal",
            "uniform",
            "random",
            "bernoulli",
            "exponential",
            "geometric",
            "cauchy",
            "log_normal",
            "multinomial",
            "randperm",
            "dropout",
            "rrelu",
        ),
    ),
    ("scans", ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp")),
    (
        "reductions",
        (
            "sum",
            "mean",
            "amax",
            "amin",
            "all",
            "any",
            "prod",
            "norm",
            "var",
            "std",
            "max",
            "min",
            "argmax",
            "argmin",
            "logsumexp",
            "_softmax",
            "_log_softmax",
        ),
    ),
    ("matmul", ("mm", "bmm", "addmm", "matmul", "linear", "convolution", "conv")),
    ("norms", ("batch_norm", "layer_norm", "group_norm", "instance_norm")),
    ("losses", ("_loss", "nll", "cross_entropy")),
    (
        "indexing",
        (
            "index",
            "gather",
            "scatter",
            "masked",
            "where",
            "take",
            "tril",
            "triu",
            "select",
            "slice",
            "narrow",
        ),
    ),
    (
        "copies",
        (
            "copy",
            "_to_copy",
            "clone",
            "cat",
            "stack",
            "view",
            "as_strided",
            "empty",
            "fill",
            "zero",
            "set_",
            "resize",
            "_reshape_alias",
            "_local_scalar_dense",
        ),
    ),
    ("rnn", ("lstm", "gru", "rnn")),
    ("runtime", ("record_stream",)),
)


def category(overload: str) -> str:
    """The campaign's op category of an overload (`pointwise` when no rule names it)."""
    base = overload.split(".")[0]
    for name, needles in CATEGORIES:
        if any(base.startswith(n) if n.startswith("_") else n in base for n in needles):
            return name
    return "pointwise"


def op_of(overload: str) -> torch._ops.OpOverload:
    """`abs.out` -> torch.ops.aten.abs.out (ValueError if aten has no such overload)."""
    name, _, overload_name = overload.partition(".")
    try:
        packet = getattr(torch.ops.aten, name)
        return getattr(packet, overload_name or "default")
    except (AttributeError, RuntimeError):
        raise ValueError(f"aten has no overload {overload!r}") from None


def _is_list(t: Any) -> bool:
    return str(t) in ("List[Tensor]", "Tensor[]", "List[Optional[Tensor]]")


@dataclass(frozen=True)
class Signature:
    """The parts of one overload's schema a mutant acts on."""

    overload: str
    names: tuple[str, ...]  # every argument's name, in order
    written: tuple[str, ...]  # arguments the schema marks as written (Tensor(a!))
    read_only: tuple[str, ...]  # tensor arguments neither written nor aliased by a return
    returns_view: bool  # a return aliases an input without writing it (a view op)
    returns_fresh: bool  # a return is a new tensor (no alias)
    tensor_list_out: bool  # a return or written argument is a Tensor[]
    has_generator: bool
    has_dim: bool
    tensors: tuple[str, ...] = ()  # arguments of type Tensor (a wrapped number arrives as one)

    @classmethod
    def of(cls, overload: str) -> Signature:
        schema = op_of(overload)._schema
        names = tuple(a.name for a in schema.arguments)
        written, read_only, aliased = [], [], set()
        for r in schema.returns:
            if r.alias_info is not None:
                aliased |= set(r.alias_info.before_set)
        for a in schema.arguments:
            is_tensor = "Tensor" in str(a.type)
            if a.alias_info is not None and a.alias_info.is_write:
                written.append(a.name)
            elif is_tensor and (a.alias_info is None or not set(a.alias_info.before_set) & aliased):
                read_only.append(a.name)
        returns = [r for r in schema.returns if "Tensor" in str(r.type)]
        return cls(
            overload=overload,
            names=names,
            written=tuple(written),
            read_only=tuple(read_only),
            returns_view=any(
                r.alias_info is not None and not r.alias_info.is_write for r in returns
            ),
            returns_fresh=any(r.alias_info is None for r in returns),
            tensor_list_out=any(_is_list(r.type) for r in schema.returns)
            or any(_is_list(a.type) for a in schema.arguments if a.name in written),
            has_generator=any("Generator" in str(a.type) for a in schema.arguments),
            has_dim="dim" in names,
            tensors=tuple(a.name for a in schema.arguments if str(a.type) == "Tensor"),
        )

    @property
    def kind(self) -> str:
        """`view`, `out` (writes an argument named out, or several), `inplace` (writes its first
        argument), `functional` (a new result), or `other` (returns nothing it made)."""
        if self.returns_view:
            return "view"
        if self.written and self.written[0] != self.names[0]:
            return "out"
        if self.written:
            return "inplace"
        return "functional" if self.returns_fresh else "other"

    @property
    def category(self) -> str:
        return category(self.overload)

    @property
    def draws(self) -> bool:
        """The overload draws random numbers (its schema: oracles.is_nondeterministic), so its
        results owe a law, not values (dropout's backward, in the random category, does not)."""
        return oracles.is_nondeterministic(op_of(self.overload))

    def bind(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by name (positional first, then keywords)."""
        bound = dict(zip(self.names, args, strict=False))
        bound.update(kwargs)
        return bound

    def rebuild(self, args: tuple, kwargs: dict[str, Any], /, **changed: Any) -> tuple[tuple, dict]:
        """(args, kwargs) of the same call with the named arguments replaced."""
        args = list(args)
        kwargs = dict(kwargs)
        for name, value in changed.items():
            index = self.names.index(name)
            if index < len(args):
                args[index] = value
            else:
                kwargs[name] = value
        return tuple(args), kwargs

    def rewrapped(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict, Any]:
        """(args, kwargs, dtype) with every Python number in a Tensor argument made a CPU scalar
        tensor again, and the dtype a fresh result must be cast to (None: as it comes).

        A wrapped number (the 2 of `x * 2`, made a tensor by the Python arg parser or by a C++
        kernel's `mul(x, 2)`) reaches a Python kernel as a Python number, and the kernel it
        replaced takes a tensor; Python cannot make a wrapped number. Of the number's own kind
        (int64, float64, complex128, bool) it is outranked by the tensors' dtype as a wrapped
        number is. Where every tensor argument is 0-dim it would not be: the number gets the type
        a kernel computes the promoted result in (float32 for float16 and bfloat16: a wrapped
        0.1 reaches a float16 kernel's float32 arithmetic unrounded to float16, 0-dim float16
        1.5 * 0.1 is 0.15, not 0.1499), and a fresh result is cast to the promoted type."""
        bound = self.bind(args, kwargs)
        numbers = {n: v for n, v in bound.items() if n in self.tensors and _is_number(v)}
        if not numbers:
            return args, kwargs, None
        tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
        zero_dim = bool(tensors) and all(t.dim() == 0 for t in tensors)
        common = (
            functools.reduce(torch.promote_types, [t.dtype for t in tensors]) if tensors else None
        )
        changed, cast = {}, None
        for name, value in numbers.items():
            dtype = _kind(value)
            if zero_dim:
                promoted = torch.result_type(torch.empty((), dtype=common), value)
                dtype = OPMATH.get(promoted, promoted)
                if dtype != promoted:
                    cast = promoted
            changed[name] = torch.scalar_tensor(value, dtype=dtype)
        args, kwargs = self.rebuild(args, kwargs, **changed)
        return args, kwargs, cast


#: the type a kernel computes a result of each reduced-precision type in (torch's opmath): a
#: wrapped number reaches the computation in it
OPMATH = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.complex32: torch.complex64,
}


def _is_number(value: Any) -> bool:
    return isinstance(value, bool | int | float | complex)


def _kind(value: Any) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.complex128 if isinstance(value, complex) else torch.float64
