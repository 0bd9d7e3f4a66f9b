"""Apply a layout to every tensor argument of a `Call` and materialise it on CPU and device."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from conformance.engine import layouts, poison
from conformance.engine.calls import Call, format_call
from conformance.engine.siblings import _is_out


@dataclass
class Leaf:
    """One tensor argument: where it sits in the schema and how it is placed in memory."""

    arg: str  # schema argument name ("self", "out", "tensors", ...)
    written: bool  # the schema marks it Tensor(a!)
    placement: layouts.Placement
    on_cpu: bool  # stays on CPU in the device run


@dataclass
class PlacedCall:
    """A call with layouts chosen; materialise() builds fresh arguments on a device."""

    call: Call
    layout: str
    leaves: list[Any]  # Leaf for tensors, the value itself otherwise
    rebuild: Rebuild  # how the leaves become (args, kwargs)

    @property
    def spec(self) -> Any:
        """The pytree spec of (args, kwargs)."""
        return self.rebuild.spec

    def signature(self) -> str:
        """The call as placed: shapes after the layout, strides/offset where not contiguous."""

        def describe(x: Any) -> Any:
            if isinstance(x, torch.UntypedStorage):
                return f"Storage[{x.nbytes()} bytes]"
            if not isinstance(x, Leaf):
                return x
            p = x.placement
            text = f"{str(p.base.dtype).removeprefix('torch.')}{list(p.size)}"
            if p.stride != layouts._contiguous_strides(p.size) or p.offset:
                text += f"(stride={list(p.stride)}, offset={p.offset})"
            if x.on_cpu:
                text += "@cpu"
            return text

        args, kwargs = self.rebuild([describe(x) for x in self.leaves])
        return format_call(self.call.overload, args, kwargs).replace("'", "")

    def layout_free(self) -> Materialized:
        """The call on CPU with every tensor a fresh contiguous copy of the placed values (the
        reference CPU must agree with across layouts). One copy a tensor, made for this run:
        a leaf's placement here describes its copy, which the run may write, not a pristine
        buffer (nothing restores a layout-free run)."""
        values: list[Any] = []
        bases = []
        for x in self.leaves:
            if isinstance(x, Leaf):
                flat = layouts.contiguous(x.placement.values())  # one copy
                copy = flat.base.view(size=flat.size)
                values.append(copy)
                bases.append((Leaf(x.arg, x.written, flat, x.on_cpu), flat.base, copy))
            elif isinstance(x, torch.UntypedStorage):
                values.append(materialize_storage(x, "cpu"))
            else:
                values.append(x)
        args, kwargs = self.rebuild(values)
        return Materialized(tuple(args), dict(kwargs), bases)

    def contiguous(self) -> bool:
        """Whether every tensor is placed contiguous at offset 0 over its whole buffer (the
        zero_size and zero_dim layouts place so, and any layout that lands on contiguous
        strides, e.g. channels_last of an N x C x 1 x 1 tensor): what CPU's layout-free run
        would place again (`consistency.layout_free`), so it has nothing to add."""
        return all(x.placement.is_whole_buffer() for x in self.leaves if isinstance(x, Leaf))

    def tensor_leaves(self) -> list[Leaf]:
        return [x for x in self.leaves if isinstance(x, Leaf)]

    def materialize(self, device: torch.device | str) -> Materialized:
        values, bases = [], []
        on_cpu = layouts.is_cpu(device)
        for leaf in self.leaves:
            if isinstance(leaf, Leaf):
                cpu = on_cpu or leaf.on_cpu
                base, view = leaf.placement.materialize(
                    "cpu" if cpu else device, cpu, read_only=not leaf.written
                )
                values.append(view)
                bases.append((leaf, base, view))
            elif isinstance(leaf, torch.device) and not on_cpu:
                values.append(torch.device(device))
            elif isinstance(leaf, torch.UntypedStorage):  # set_(storage): a copy per run
                values.append(materialize_storage(leaf, device))
            else:
                values.append(leaf)
        args, kwargs = self.rebuild(values)
        return Materialized(tuple(args), dict(kwargs), bases)


@dataclass(frozen=True)
class Rebuild:
    """(args, kwargs) from a call's leaves: by slicing where each top-level argument is a leaf
    of its own (most calls: a fifth of placing's time went to pytree's unflatten), else by the
    tree spec (lists of tensors, nested values)."""

    spec: Any  # pytree spec of (args, kwargs)
    n_args: int
    keys: tuple[str, ...] | None  # the kwargs' names when every top-level value is a leaf

    @classmethod
    def of(cls, call: Call) -> tuple[list, Rebuild]:
        """The leaves of the call's (args, kwargs) and how to rebuild them."""
        leaves, spec = tree_flatten((call.args, call.kwargs))
        top = [*call.args, *call.kwargs.values()]
        flat = len(top) == len(leaves) and all(a is b for a, b in zip(top, leaves, strict=True))
        return leaves, cls(spec, len(call.args), tuple(call.kwargs) if flat else None)

    def __call__(self, values: list) -> tuple[Any, Any]:
        if self.keys is None:
            return tree_unflatten(values, self.spec)
        n = self.n_args
        return tuple(values[:n]), dict(zip(self.keys, values[n:], strict=True))


def materialize_storage(storage: torch.UntypedStorage, device: torch.device | str):
    """A fresh untyped storage on `device` holding `storage`'s bytes."""
    data = torch.empty(0, dtype=torch.uint8).set_(storage).clone()
    return data.to(device).untyped_storage()


@dataclass
class Materialized:
    args: tuple
    kwargs: dict
    # (leaf, backing buffer, view); one tensor where the placement is its whole buffer (on a
    # device; on CPU where the argument is only read): read a buffer flat with read_storage
    bases: list[tuple[Leaf, torch.Tensor, torch.Tensor]]
    _written: list[tuple[str, torch.Tensor]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def written(self) -> list[tuple[str, torch.Tensor]]:
        """(name, view) of each written tensor, named as the checks name it: its argument's
        name, or `name[k]` for the k-th tensor of a list argument (a foreach op's `self`: one
        name for twenty tensors kept the float64 truth of the last one only, and a correctly
        rounded 0-dim float16 `_foreach_mul_` failed `rounding`). Worked out once (the checks
        ask for it several times a sample; the bases never change)."""
        if self._written is None:
            leaves = [(leaf.arg, view) for leaf, _, view in self.bases if leaf.written]
            self._written = _numbered(leaves) if len(leaves) > 1 else leaves
        return list(self._written)


def _numbered(leaves: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """(name, view) with `name[k]` for the k-th view of an argument named more than once."""
    many = {a for a in {a for a, _ in leaves} if sum(b == a for b, _ in leaves) > 1}
    seen: dict[str, int] = {}
    out = []
    for arg, view in leaves:
        k = seen.get(arg, 0)
        seen[arg] = k + 1
        out.append((f"{arg}[{k}]" if arg in many else arg, view))
    return out


def arg_roles(
    schema: torch._C.FunctionSchema, call: Call, written: tuple[str, ...] = ()
) -> list[tuple[str, bool]]:
    """(argument name, written) for each top-level value of (args, kwargs), in flatten order."""
    params = list(schema.arguments)
    by_name = {p.name: p for p in params}
    found = [params[i] if i < len(params) else None for i in range(len(call.args))]
    found += [by_name.get(k) for k in call.kwargs]
    names = [p.name if p is not None else "?" for p in found[: len(call.args)]]
    names += list(call.kwargs)
    return [
        (
            name,
            name in written
            or bool(p is not None and p.alias_info is not None and p.alias_info.is_write),
        )
        for name, p in zip(names, found, strict=True)
    ]


def place(
    call: Call,
    layout: str,
    schema: torch._C.FunctionSchema,
    resize_out: bool = False,
    written: tuple[str, ...] = (),
) -> PlacedCall | None:
    """Choose placements for `layout`; None when the layout changes no argument."""
    tensors, leaves_in, rebuild, unmoved = _flattened(call, schema, written)
    chosen = _choose(tensors, layout, resize_out, unmoved)
    if chosen is None:
        return None
    it = iter(chosen)
    leaves = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves_in]
    return PlacedCall(call, layout, leaves, rebuild)


def _flattened(
    call: Call, schema: torch._C.FunctionSchema, written: tuple[str, ...]
) -> tuple[list[tuple[torch.Tensor, str, bool, bool]], list, Rebuild, list]:
    """(each tensor with its argument's name, whether it is written, whether it stays on CPU;
    the leaves of (args, kwargs); how to rebuild them; each tensor's contiguous leaf,
    made when first needed): the same for every layout and case of the call, so learned once
    (kept on the call; a placement's buffer is only ever copied from). An out= tensor is
    placed holding poison (poison.py), never what the sample's memory held."""
    key = (schema.name, schema.overload_name, written)
    if key not in call.placing:
        top = list(call.args) + list(call.kwargs.values())
        outs = {a.name for a in schema.arguments if _is_out(a)}
        tensors = []
        for i, (value, (name, writes)) in enumerate(
            zip(top, arg_roles(schema, call, written), strict=True)
        ):
            flat, _ = tree_flatten(value)
            cpu = i in call.cpu_args
            tensors += [
                (poison.unwritten_out(t) if name in outs else t, name, writes, cpu)
                for t in flat
                if isinstance(t, torch.Tensor)
            ]
        call.placing[key] = (tensors, *Rebuild.of(call), [None] * len(tensors))
    return call.placing[key]


def _choose(tensors, layout: str, resize_out: bool, unmoved: list) -> list[Leaf] | None:
    """Each tensor's leaf for `layout` (None when the layout changes no argument); a tensor the
    layout leaves alone gets its contiguous leaf, one per tensor for every layout (`unmoved`;
    a leaf is never changed)."""
    fn = layouts.LAYOUTS[layout]
    eligible = [True] * len(tensors)
    if layout in layouts.SHAPE_CHANGING:
        eligible = _largest(tensors)
    changed = False
    out = []
    for i, ((t, name, written, on_cpu), ok) in enumerate(zip(tensors, eligible, strict=True)):
        placement = None
        if resize_out and written and name == "out":
            placement = layouts.contiguous(t.new_empty(0))
            changed = True
        elif ok and layout != "contiguous" and not (written and layout in layouts.READ_ONLY):
            placement = fn(t)
            changed = changed or placement is not None
        if placement is not None:
            out.append(Leaf(name, written, placement, on_cpu))
            continue
        if unmoved[i] is None:
            unmoved[i] = Leaf(name, written, layouts.contiguous(t), on_cpu)
        out.append(unmoved[i])
    if layout != "contiguous" and not changed:
        return None
    return out


def _largest(tensors) -> list[bool]:
    """Shape-changing layouts apply to the highest-rank inputs (others broadcast against them)."""
    inputs = [t for t, _, written, _ in tensors]
    ndim = max((t.dim() for t in inputs), default=0)
    lead = max((t.shape[0] for t in inputs if t.dim() == ndim and ndim), default=0)
    return [t.dim() == ndim and (ndim == 0 or t.shape[0] == lead) for t in inputs]
