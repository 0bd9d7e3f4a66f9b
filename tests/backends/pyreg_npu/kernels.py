"""pyreg_npu's kernels, registered from Python with ``torch.library``.

Most are CPU-as-device: the device arguments are copied to CPU (``Tensor.cpu()``, which reaches
the native ``_copy_from``), the overload runs on CPU, written arguments are copied back and
results are placed on the device with CPU's strides (``empty`` + ``_copy_from`` + ``set_``).
The others carry the backend's bugs (the package docstring lists them)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

#: overloads served by the generic CPU-as-device kernel
GENERIC = (
    "add.Tensor",
    "add_.Tensor",
    "sub.Tensor",
    "mul.Tensor",
    "mul_.Tensor",
    "div.Tensor",
    "neg",
    "abs",
    "exp",
    "relu",
    "sigmoid",
    "tanh",
    "eq.Tensor",
    "lt.Scalar",
    "where.self",
    "masked_fill_.Scalar",
    "sum.dim_IntList",
    "mean.dim",
    "amax",
    "mm",
    "bmm",
    "cat",
    "index_select",
    "fill_.Scalar",
    "zero_",
    "clone",
    "_softmax",
)

_LIBS: list[torch.library.Library] = []  # kept alive: a dropped Library deregisters its kernels


def _overload(name: str) -> Any:
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _on_device(x: Any, device: str) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == device


def to_device(r: torch.Tensor, device: str) -> torch.Tensor:
    """A CPU tensor placed on the device with the same sizes, strides and storage offset."""
    n = r.untyped_storage().nbytes() // r.element_size()
    host = torch.empty(0, dtype=r.dtype).set_(r.untyped_storage(), 0, (n,), (1,))
    flat = torch.empty(n, dtype=r.dtype, device=device)
    if n:
        flat.copy_(host)
    out = torch.empty(0, dtype=r.dtype, device=device)
    return out.set_(flat.untyped_storage(), r.storage_offset(), r.size(), r.stride())


def generic(name: str, device: str):
    """The CPU-as-device kernel of `name` (refusing a 0-dim CPU operand: one of the bugs)."""
    op = _overload(name)
    written = [
        i for i, a in enumerate(op._schema.arguments) if a.alias_info and a.alias_info.is_write
    ]

    def kernel(*args: Any, **kwargs: Any) -> Any:
        for x in args:
            if isinstance(x, torch.Tensor) and x.device.type == "cpu":
                raise RuntimeError(
                    f"pyreg: expected all tensors on {device}, got a cpu tensor in {name}"
                )
        host_args, host_kwargs = tree_map(
            lambda x: x.cpu() if _on_device(x, device) else x, (list(args), kwargs)
        )
        result = op(*host_args, **host_kwargs)
        for i in written:
            if i < len(args) and _on_device(args[i], device):
                args[i].copy_(host_args[i])
        by_id = {id(h): d for h, d in zip(host_args, args, strict=True)}

        def back(r: Any) -> Any:
            if not isinstance(r, torch.Tensor):
                return r
            own = by_id.get(id(r))  # an argument returned (in-place, out=): that argument
            return own if own is not None else to_device(r, device)

        return tree_map(back, result)

    return kernel


def to_copy(device: str):
    """``_to_copy``: converts and moves, but always into a contiguous result (drops channels_last
    and every other strides of memory_format=preserve)."""

    def kernel(x: torch.Tensor, **options: Any) -> torch.Tensor:
        target = torch.device(options.get("device") or x.device)
        out = torch.empty(x.shape, dtype=options.get("dtype") or x.dtype, device=target)
        out.copy_(x)
        return out

    return kernel


def view(device: str):
    """``view``: returns a reshaped copy, not an alias (writes to it never reach the input)."""

    def kernel(x, size):
        host = x.cpu().reshape(size)
        return to_device(host.contiguous(), device)

    return kernel


def empty_strided(device: str):
    """``empty_strided``: allocates, then asks for the strides with ``as_strided`` (which this
    backend does not have)."""

    def kernel(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
        n = 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True)) if all(size) else 0
        flat = torch.empty(n, dtype=dtype, device=device)
        return flat.as_strided(size, stride)

    return kernel


def empty_permuted(device: str):
    """``empty_permuted``: ignores the physical layout (always contiguous strides)."""

    def kernel(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
        return torch.empty(size, dtype=dtype, device=device)

    return kernel


def cos(device: str):
    """``cos``: the vendor kernel handles contiguous float32 only."""
    inner = generic("cos", device)

    def kernel(x):
        if x.dtype != torch.float32 or not x.is_contiguous():
            raise NotImplementedError(
                f"pyreg: cos supports contiguous float32 only, got {x.dtype} "
                f"{'contiguous' if x.is_contiguous() else 'strided'}"
            )
        return inner(x)

    return kernel


def register(device: str) -> None:
    """Register every kernel for PrivateUse1 (the device is already renamed `device`)."""
    lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
    for name in GENERIC:
        lib.impl(name, generic(name, device))
    lib.impl("_to_copy", to_copy(device))
    lib.impl("view", view(device))
    lib.impl("empty_strided", empty_strided(device))
    lib.impl("empty_permuted", empty_permuted(device))
    lib.impl("cos", cos(device))
    # a name aten declares no schema for (aten has floor_divide; a port from another framework)
    lib.impl("floordiv", lambda *args, **kwargs: NotImplemented)
    _LIBS.append(lib)
