"""A `Call`: one invocation of one aten overload with concrete CPU arguments."""

from __future__ import annotations

import hashlib
import os
import pickle
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.held_stderr import HELD


@dataclass
class Call:
    """Arguments for one aten overload, as CPU values (tensors contiguous)."""

    overload: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    # positional indices of tensor args that stay on CPU in the device run (e.g. _copy_from)
    cpu_args: frozenset[int] = frozenset()
    # what placing learns of the call once for every layout and case (engine/placing.py)
    placing: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # CPU's runs on contiguous copies of its values, one for every case whose copies are the
    # same (engine/consistency.py `layout_free`)
    layout_free: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        """Pickled (to a forked task) without what placing learned (views of its tensors) or
        the layout-free runs."""
        return {**self.__dict__, "placing": {}, "layout_free": {}}

    def tensors(self) -> list[torch.Tensor]:
        leaves, _ = tree_flatten((self.args, self.kwargs))
        return [x for x in leaves if isinstance(x, torch.Tensor)]

    def signature(self) -> str:
        """A short description used to deduplicate samples and in failure messages."""

        def describe(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
            if isinstance(x, torch.UntypedStorage):
                return f"Storage[{x.nbytes()} bytes]"
            return x

        args = [tree_map(describe, a) for a in self.args]
        for i in self.cpu_args:  # which tensors stay on CPU is part of the call (copy direction)
            if i < len(args):
                args[i] = tree_map(lambda x: f"{x}@cpu", args[i])
        kwargs = tree_map(describe, self.kwargs)
        return format_call(self.overload, args, kwargs)


def dedupe(calls: list[Call]) -> list[Call]:
    """`calls` without repeats of a signature, first occurrences in order."""
    seen: set[str] = set()
    out = []
    for c in calls:
        key = c.signature()
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


# torch.memory_format does not pickle (torch.save raises "cannot pickle 'module' object"): a
# saved call names it instead, as a ("__memory_format__", name) pair a standalone script can read
MEMORY_FORMAT_TAG = "__memory_format__"


def portable(tree: Any) -> Any:
    """`tree` with every torch.memory_format replaced by its picklable name tag."""
    return tree_map(
        lambda x: (
            (MEMORY_FORMAT_TAG, str(x).removeprefix("torch."))
            if isinstance(x, torch.memory_format)
            else x
        ),
        tree,
    )


def _is_tag(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and x[0] == MEMORY_FORMAT_TAG


def restored(tree: Any) -> Any:
    """The inverse of `portable` (tags become torch.memory_format values again), and of what
    torch.load does to storages: a saved UntypedStorage comes back as a TypedStorage, which the
    placing would not recognise (set_ would get a CPU storage on the device run); and a loaded
    tensor's storage is not resizable, so an out= argument that the op resizes raised (or, in
    `_linalg_det.result` on CPU, crashed the process): each storage is copied once into a
    resizable one, views of one storage stay views of its copy."""
    copies: dict[int, torch.UntypedStorage] = {}

    def resizable(storage: torch.UntypedStorage) -> torch.UntypedStorage:
        if storage.resizable():
            return storage
        key = storage._cdata
        if key not in copies:
            copies[key] = storage.clone()
        return copies[key]

    def restore(x: Any) -> Any:
        if _is_tag(x):
            return getattr(torch, x[1])
        if isinstance(x, torch.TypedStorage):
            return resizable(x._untyped_storage)  # (x.untyped() warns: TypedStorage deprecated)
        if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.device.type == "cpu":
            storage = x.untyped_storage()
            fresh = resizable(storage)
            if fresh is not storage:
                copy = torch.empty(0, dtype=x.dtype)
                copy.set_(fresh, x.storage_offset(), x.size(), x.stride())
                return copy.requires_grad_(x.requires_grad)
        return x

    return tree_map(restore, tree, is_leaf=_is_tag)


def save_calls(captured: dict[str, dict[str, list[Call]]], path: str) -> None:
    """Write {kind: {overload: [Call]}} atomically (a torn write never leaves a cache file)."""
    held: dict[bytes, list[torch.Tensor]] = {}
    data = {
        kind: {
            overload: [
                (c.overload, *_share_values(portable((c.args, c.kwargs)), held), c.cpu_args)
                for c in calls
            ]
            for overload, calls in by_overload.items()
        }
        for kind, by_overload in captured.items()
    }
    save_atomically(data, path)


def _share_values(tree: Any, held: dict[bytes, list[torch.Tensor]]) -> Any:
    """`tree` (one call's arguments) with each tensor whose values an earlier call of the file
    holds replaced by that call's tensor, so that torch.save writes them once: the functional,
    in-place and out= forms of a sample and the samples of sibling overloads hold the same values
    (more than half of a cold cache's bytes). Only a plain tensor that owns its whole storage,
    alone in its call, is shared, and no two tensors of one call share (the n-th of equal values
    in a call is the n-th such tensor held): loading copies each storage once per call
    (`restored`), so a loaded call's tensors alias nothing they did not alias when captured."""
    leaves, _ = tree_flatten(tree)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    storages = Counter(t.untyped_storage().data_ptr() for t in tensors if t.numel())
    used: Counter[bytes] = Counter()

    def share(x: Any) -> Any:
        if not (type(x) is torch.Tensor and x.numel() and x.device.type == "cpu"):
            return x
        if x.layout != torch.strided or x.is_quantized or x.requires_grad:
            return x  # (_tensor_bytes describes a quantized tensor by its abridged repr)
        if x.is_conj() or x.is_neg():
            return x
        storage = x.untyped_storage()
        whole = x.storage_offset() == 0 and storage.nbytes() == x.numel() * x.element_size()
        if not (whole and x.is_contiguous()) or storages[storage.data_ptr()] > 1:
            return x
        key = hashlib.sha1(_tensor_bytes(x)).digest()
        same = held.setdefault(key, [])
        n, used[key] = used[key], used[key] + 1
        if n == len(same):
            same.append(x)
        return same[n]

    return tree_map(share, tree)


def save_atomically(value: Any, path: str, pickle_module: Any = pickle) -> None:
    """`torch.save` of `value` to `path`, atomically (a torn write never leaves a cache file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        torch.save(value, tmp, pickle_module=pickle_module)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_saved(path: str) -> Any:
    """What `save_atomically` wrote. What torch warns loading it (a complex32 tensor:
    "ComplexHalf support is experimental") is the suite's own work's: tallied with the
    capture's (engine/held_stderr.py), never printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = torch.load(path, weights_only=False)
    HELD.tally.update((w.category.__name__, str(w.message)) for w in caught)
    return value


def load_calls(path: str) -> dict[str, Mapping[str, list[Call]]]:
    """What `save_calls` wrote, each overload's calls restored when first asked for."""
    data = load_saved(path)
    return {kind: RestoredCalls(by_overload) for kind, by_overload in data.items()}


class RestoredCalls(Mapping[str, list[Call]]):
    """{overload: [Call]} of one kind of a saved file, each overload's calls restored on first
    use: restoring copies every storage (`restored`), and a file holds every overload an OpInfo
    reaches while a case asks for one."""

    def __init__(self, saved: dict[str, list[tuple]]) -> None:
        self._saved = saved
        self._calls: dict[str, list[Call]] = {}

    def __getitem__(self, overload: str) -> list[Call]:
        if overload not in self._calls:
            self._calls[overload] = [
                Call(name, restored(args), restored(kwargs), cpu_args)
                for name, args, kwargs, cpu_args in self._saved[overload]
            ]
        return self._calls[overload]

    def __iter__(self) -> Iterator[str]:
        return iter(self._saved)

    def __len__(self) -> int:
        return len(self._saved)


def content_digest(calls: list[Call]) -> str:
    """A digest of what the calls compute with: names, every argument's value (tensors by
    dtype, shape, strides and bytes). Equal calls built in another process give the same."""
    digest = hashlib.sha1()
    for call in calls:
        leaves, spec = tree_flatten((call.args, call.kwargs))
        digest.update(f"{call.overload}|{spec}|{sorted(call.cpu_args)}".encode())
        for x in leaves:
            if isinstance(x, torch.Tensor):
                digest.update(_tensor_bytes(x.detach()))
            else:
                digest.update(repr(x).encode())
    return digest.hexdigest()[:16]


def _tensor_bytes(t: torch.Tensor) -> bytes:
    if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
        return repr(t).encode()  # values included; rare in samples
    head = f"{t.dtype}{list(t.shape)}{t.stride()}".encode()
    flat = t.resolve_conj().resolve_neg().contiguous().view(-1)
    return head + (flat.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def clone_tree(tree: Any) -> Any:
    """Deep-copy every tensor in a pytree as a contiguous, detached CPU tensor."""
    return tree_map(
        lambda x: x.detach().clone().contiguous() if isinstance(x, torch.Tensor) else x, tree
    )


def format_call(overload: str, args: Any, kwargs: dict) -> str:
    """'op(a, b, k=v)' from already-described arguments."""
    parts = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
    return f"{overload}({', '.join(parts)})"
