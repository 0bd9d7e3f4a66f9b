"""Recording what the model workloads call: the overloads, and the arguments of the calls.

`OverloadRecorder` is the dispatch mode the workloads (engine/workloads.py) run under: every
aten overload they dispatch, and for an overload with a composite kernel what that kernel calls
(run again on meta copies of its arguments: the path of a backend without its own kernel). It
also keeps each overload's distinct calls as JSON data (`encode_call`: shapes, dtypes, option
values, the values of small integer and bool tensors; never floating values), of which
`select_calls` keeps the most varied `CALLS_PER_OVERLOAD`: the model calls samples/models.py
replays.
"""

from __future__ import annotations

import json
import math
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.discovery import overload_name
from conformance.engine.siblings import _is_out

# Kernels that run for a backend without its own kernel: what they call is what it reaches.
COMPOSITE_KEYS = (
    "CompositeImplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
)


class OverloadRecorder(TorchDispatchMode):
    """Records every aten overload dispatched inside the mode, and what composite kernels call.

    An overload with a composite kernel (e.g. `addmm`, whose default backend kernel calls
    `addmm.out`, or `clone`: `empty_strided` + `copy_`) is run a second time through that kernel
    with the mode active, on meta copies of its arguments (on CPU copies where meta cannot run
    it), so its callees are recorded as reached `inside` it: that is the path of a backend that
    registers no kernel for it. The real call runs unchanged on CPU.

    `calls` holds each overload's distinct argument signatures ({key: encoded call}, the first
    call of each key), for the calls made directly and inside composite kernels alike: inside
    calls are what a backend without the composite kernel runs (`addmm.out` at the linear
    layer's shapes). A meta copy's integer values are read from the tensor it copies.
    """

    def __init__(self) -> None:
        super().__init__()
        self.top: set[str] = set()  # called by the workload itself
        self.inside: dict[str, set[str]] = {}  # callee -> composite overloads that called it
        self.calls: dict[str, dict[str, dict]] = {}
        self._stack: list[str] = []
        # id(meta tensor) -> (it, the tensor it copies or views, whether a view): the pair
        # keeps the id from being reused
        self._origin: dict[int, tuple[torch.Tensor, torch.Tensor, bool]] = {}
        self._partial: set[str] = set()  # kept calls with bool tensors of unknown values
        # storages no op wrote since an `empty` made them (their values are whatever memory
        # held): kept alive while here, so that no other storage takes their address
        self._fresh: dict[int, torch.UntypedStorage] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if name.startswith("aten::"):
            overload = overload_name(name)
            if self._stack:
                self.inside.setdefault(overload, set()).add(self._stack[-1])
            else:
                self.top.add(overload)
            noted = self._note(func, overload, args, kwargs)
            if overload not in self._stack:
                self._probe(func, overload, args, kwargs)
            for written in _written(func, args, kwargs):
                self._fresh.pop(_storage_key(written), None)
            grows = overload.partition(".")[0] in RESIZES and _is_cpu(args[0])
            before = args[0].numel() if grows else 0
            result = func(*args, **kwargs)
            if overload.partition(".")[0] in UNINITIALIZED or (grows and result.numel() > before):
                if _is_cpu(result):
                    self._fresh[_storage_key(result)] = result.untyped_storage()
            if noted is not None and isinstance(result, torch.Tensor):
                noted["result"] = _name(result.dtype)  # the dtype of a call without tensors
            if self._stack and func.is_view and _is_meta(result) and _is_meta(args[0]):
                self._origin[id(result)] = (result, args[0], True)  # (a probe's view)
            return result
        return func(*args, **kwargs)

    def _note(self, func, overload: str, args: tuple, kwargs: dict) -> dict | None:
        """Keep the call's arguments if no earlier call of `overload` had the same signature
        (or only one without some bool values); the kept call if it has no tensor argument
        (its result's dtype is the caller's to add)."""
        try:
            key = json.dumps(encode_call(func, overload, args, kwargs, None))
        except Unencodable:
            return None
        seen = self.calls.setdefault(overload, {})
        if seen.get(key) and key not in self._partial:
            return None
        missing: list[torch.Tensor] = []
        try:
            call = encode_call(func, overload, args, kwargs, self._values, missing)
        except Unencodable:  # integer values unknown (a larger tensor, or a meta one):
            seen.setdefault(key, {})  # a later call of the same signature may have them
            return None
        if seen.get(key) and missing:
            return None
        seen[key] = call
        if missing:
            self._partial.add(key)
        else:
            self._partial.discard(key)
        tensors = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        return None if tensors else call

    def _values(self, t: torch.Tensor) -> torch.Tensor | None:
        """The CPU tensor holding `t`'s values, with `t`'s strides: `t`, or for a meta copy
        (or a view of one, made inside a composite kernel) the same elements of the tensor it
        copies; None if unknown, UNSET if no op wrote them yet."""
        if t.device.type == "cpu":
            return UNSET if _storage_key(t) in self._fresh else t
        _, source, view = self._origin.get(id(t), (None, None, False))
        values = self._values(source) if source is not None else None
        if values is None or values is UNSET or not view:
            return values
        offset = values.storage_offset() + t.storage_offset() - source.storage_offset()
        return values.as_strided(t.shape, t.stride(), offset)

    def _to_meta(self, x):
        if isinstance(x, torch.Tensor):
            meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
            self._origin[id(meta)] = (meta, x, False)
            return meta
        return x

    def _clone_written(self, func):
        """Copies only for tensors the schema writes (the probe must not change the
        workload)."""

        def copy(x):
            if not isinstance(x, torch.Tensor):
                return x
            clone = x.detach().clone()
            if _storage_key(x) in self._fresh:
                self._fresh[_storage_key(clone)] = clone.untyped_storage()
            return clone

        writes = any(
            a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments
        )
        return copy if writes else (lambda x: x)

    def _probe(self, func, overload: str, args: tuple, kwargs: dict) -> None:
        key = next(
            (
                k
                for k in COMPOSITE_KEYS
                if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k)
            ),
            None,
        )
        if key is None:
            return
        dispatch_key = getattr(torch._C.DispatchKey, key)
        for copy in (self._to_meta, self._clone_written(func)):
            probe_args, probe_kwargs = tree_map(copy, (args, kwargs))
            self._stack.append(overload)
            try:
                with self, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    func._op_dk(dispatch_key, *probe_args, **probe_kwargs)
                return
            except Exception:
                continue  # data-dependent on meta: try CPU copies
            finally:
                self._stack.pop()
                if not self._stack:
                    self._origin.clear()


# overloads (by name) whose result holds whatever memory held (a resize that grows its tensor:
# in part): its values are never recorded
UNINITIALIZED = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)
RESIZES = frozenset({"resize_", "resize_as_"})
UNSET = object()  # `_values` of such a tensor, until an op writes it


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors the call writes (in-place and out= arguments)."""
    written = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = kwargs.get(a.name) if a.kwarg_only else (args[i] if i < len(args) else None)
            leaves = value if isinstance(value, list | tuple) else [value]
            written += [t for t in leaves if _is_cpu(t)]
    return written


def _is_cpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu"


def _is_meta(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "meta"


# what the calls file keeps: distinct signatures per overload; integer and bool tensor values up
# to this many elements (a call whose larger integer input has no values is never kept)
CALLS_PER_OVERLOAD = 4
MAX_RECORDED_VALUES = 4096


class Unencodable(Exception):
    """An argument the calls file cannot hold (a storage, a generator), or integer values
    that were not recorded."""


def encode_call(
    func, overload: str, args: tuple, kwargs: dict, values_of, missing: list | None = None
) -> dict:
    """One call as JSON data: {"op", "args", "kwargs"?} (positional and keyword as the
    dispatcher passed them). Tensors become {"tensor": dtype, "shape", "stride" (only if not
    contiguous: a layout hint), "values" (of integer and bool inputs, flat)}; `values_of` gives
    the CPU tensor holding a tensor's values (or None: an integer input raises Unencodable, a
    bool one, always safe to refill, is encoded without values and appended to `missing`);
    without `values_of`, the call's signature (no strides, no values). Dtypes, layouts, memory
    formats and devices become {"dtype": name} and the like (every device "cpu"), non-finite
    floats {"float": "inf"}."""
    schema = func._schema
    outs = {a.name for a in schema.arguments if _is_out(a)}

    def encode(x, out: bool):
        if isinstance(x, torch.Tensor):
            return _encode_tensor(x, out, values_of, missing)
        if isinstance(x, (list, tuple)):
            return [encode(v, out) for v in x]
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"float": str(x)}
        if isinstance(x, complex):
            return {"complex": [encode(x.real, out), encode(x.imag, out)]}
        if isinstance(x, torch.dtype):
            return {"dtype": _name(x)}
        if isinstance(x, torch.layout):
            return {"layout": _name(x)}
        if isinstance(x, torch.memory_format):
            return {"memory_format": _name(x)}
        if isinstance(x, torch.device):
            return {"device": "cpu"}
        raise Unencodable(type(x).__name__)

    positional = [a for a in schema.arguments if not a.kwarg_only]
    call = {
        "op": overload,
        "args": [
            encode(x, i < len(positional) and _is_out(positional[i])) for i, x in enumerate(args)
        ],
    }
    if kwargs:
        call["kwargs"] = {k: encode(v, k in outs) for k, v in kwargs.items()}
    return call


def _encode_tensor(t: torch.Tensor, out: bool, values_of, missing: list | None) -> dict:
    encoded = {"tensor": _name(t.dtype), "shape": list(t.shape)}
    if t.layout != torch.strided:
        raise Unencodable(str(t.layout))
    if values_of is None:  # the signature: no strides, no values
        return encoded
    if not t.is_contiguous():
        encoded["stride"] = list(t.stride())
    if out or t.is_floating_point() or t.is_complex():
        return encoded
    source = values_of(t) if t.numel() <= MAX_RECORDED_VALUES else None
    if source is UNSET:  # not written since `empty` made it: nothing to record (zeros)
        return encoded
    if source is None and t.dtype == torch.bool and missing is not None:
        missing.append(t)
        return encoded
    if source is None:
        raise Unencodable("integer values")
    encoded["values"] = [int(v) for v in source.reshape(-1).tolist()]
    return encoded


def _name(x) -> str:
    return str(x).removeprefix("torch.")


def select_calls(candidates: list[dict], limit: int = CALLS_PER_OVERLOAD) -> list[dict]:
    """At most `limit` of one overload's distinct calls, the most varied first: each pick adds
    a dtype combination, then option values, then tensor ranks not picked yet, else the most
    operand shapes not picked yet, then the most elements (ties by the call's text: the same
    candidates give the same picks)."""
    left = sorted(candidates, key=lambda c: json.dumps(c, sort_keys=True))
    features = {id(c): _features(c) for c in left}
    picked: list[dict] = []
    seen: tuple[set, set, set] = (set(), set(), set())
    shapes: set[tuple[int, tuple]] = set()  # (operand, shape)
    while left and len(picked) < limit:

        def score(c: dict) -> tuple:
            dtypes, options, ranks, sizes = features[id(c)]
            new = sum((i, s) not in shapes for i, s in enumerate(sizes))
            known = (dtypes in seen[0], options in seen[1], ranks in seen[2])
            return (*(not k for k in known), new, sum(math.prod(s) for s in sizes))

        best = max(left, key=score)  # (the first of equal scores: sorted by text)
        left.remove(best)
        picked.append(best)
        dtypes, options, ranks, sizes = features[id(best)]
        for known, feature in zip(seen, (dtypes, options, ranks), strict=True):
            known.add(feature)
        shapes.update(enumerate(sizes))
    return picked


def _features(call: dict) -> tuple[tuple, str, tuple, tuple]:
    """(tensor dtypes, the non-tensor arguments, tensor ranks, tensor shapes) of an encoded
    call."""
    tensors: list[dict] = []

    def strip(x):
        if isinstance(x, dict) and "tensor" in x:
            tensors.append(x)
            return "T"
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        return x

    options = json.dumps(strip({"args": call["args"], "kwargs": call.get("kwargs", {})}))
    dtypes = tuple(t["tensor"] for t in tensors)
    ranks = tuple(len(t["shape"]) for t in tensors)
    return dtypes, options, ranks, tuple(tuple(t["shape"]) for t in tensors)
