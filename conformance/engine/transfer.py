"""The harness's only paths into and out of device memory, each as primitive as possible.

Everything the suite places on the device or reads back goes through these two functions, so a
broken strided or offset copy in the backend is blamed on `_copy_from`, never on the op that
happened to produce a strided result:

- `to_device`: one contiguous host->device copy into a fresh contiguous block
  (`empty` + `_copy_from`, storage offset 0). Views are then made with `as_strided` (a
  contiguous tensor that is its whole block needs none: `layouts.Placement.materialize`).
- `read_back`: one contiguous device->host copy of the *whole storage* (through an
  `as_strided` view at offset 0 that covers it, unless the tensor already is that: contiguous,
  offset 0, as large as its storage), then the tensor's size, strides and storage offset are
  rebuilt on CPU with `as_strided` (a tensor that is its whole storage is its copy as it is,
  where the copy's strides are already its own). No device kernel sees the offset or the
  strides.

The foundation probes (`foundations.py`) check exactly these paths first.
"""

from __future__ import annotations

import torch

#: What the harness relies on, for the run header.
RELIES_ON = (
    "inputs: empty + one contiguous host->device _copy_from per buffer, views by as_strided "
    "(none for contiguous inputs); results: one contiguous device->host _copy_from of the whole "
    "storage (through as_strided unless the result is its whole storage), strides and offset "
    "rebuilt on CPU where they differ from the copy's (the backend's own .cpu() only for "
    "sparse, quantized or storage-less tensors)"
)


def has_storage(t: torch.Tensor) -> bool:
    """Whether `t`'s storage can be observed: it has bytes and a data pointer (standard APIs
    only). A lazy device's tensors (torch_xla, torch._lazy) have none: their strides, offsets
    and the memory around their views cannot be observed, only their values (`.cpu()`)."""
    return _stored_elements(t) is not None


def _stored_elements(t: torch.Tensor) -> int | None:
    """`storage_elements(t)` where the storage can be observed (bytes and a data pointer), else
    None: one look at the storage answers `has_storage` and the size (every read-back asks)."""
    try:
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes <= 0 or storage.data_ptr() == 0:
            return None
    except Exception:  # noqa: BLE001 - "an invalid python storage": none to observe
        return None
    return nbytes // t.element_size()


def plain(t: torch.Tensor) -> torch.Tensor:
    """`t` without functionalization's wrapper: a lazy device's op that writes a CPU argument
    (torch_xla's `_copy_from` into a CPU dst) returns the argument wrapped as a functional
    tensor, which plain CPU ops refuse to mix with ("mutating a non-functional tensor with a
    functional tensor"); its values and storage are the argument's."""
    if t.is_cpu and torch._is_functional_tensor(t):
        return torch._from_functional_tensor(t)
    return t


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` is `b`, or `b` wrapped by functionalization (`plain`)."""
    if a is b:
        return True
    inner = plain(a)
    return inner is not a and inner.data_ptr() == b.data_ptr() and inner.shape == b.shape


def to_device(flat: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A contiguous device copy of the contiguous CPU tensor `flat` (storage offset 0)."""
    out = torch.empty(size=flat.shape, dtype=flat.dtype, device=device)
    if flat.numel():
        out.copy_(flat)
    return out


def to_host(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A device->host copy of `t` (converted to `dtype`) by `copy_` into a fresh CPU tensor; a
    lazy device's functional tensor cannot be the source of a CPU tensor's `copy_`
    (functionalization refuses it), so its values are taken with `.to("cpu")`."""
    dtype = t.dtype if dtype is None else dtype
    if not t.is_cpu and not has_storage(t):
        return lazy_values(t).to(dtype)
    return _host_copy(t, dtype)


def _host_copy(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t`'s values (converted to `dtype`) in a fresh contiguous CPU tensor of its shape, by one
    `copy_` (a tensor that is its whole storage: one contiguous device->host copy)."""
    host = torch.empty(size=t.shape, dtype=dtype)
    host.copy_(t.detach() if t.requires_grad else t)  # no graph into the copy
    return host


def storage_elements(t: torch.Tensor) -> int:
    """How many elements of `t`'s dtype its storage holds."""
    return t.untyped_storage().nbytes() // t.element_size()


def is_whole_storage(t: torch.Tensor, n: int | None = None) -> bool:
    """Whether `t` is exactly its storage: contiguous, offset 0, as many elements as the storage
    holds (`n`), no conj/neg bit."""
    n = storage_elements(t) if n is None else n
    return (
        t.numel() == n
        and t.storage_offset() == 0
        and t.is_contiguous()
        and not t.is_conj()
        and not t.is_neg()
    )


def read_storage(t: torch.Tensor, flat: bool = True) -> torch.Tensor:
    """The whole storage of device tensor `t` as a contiguous 1-D CPU tensor of `t`'s dtype
    (`flat` off: in `t`'s own shape where `t` is its whole storage, one view fewer).

    A non-empty tensor without observable storage (a lazy device's) is read by value with
    `.cpu()`: for a tensor that is its whole buffer (as the harness places them) that is the
    buffer's contents, the best a lazy device lets anyone observe."""
    n = _stored_elements(t)
    if n is None:
        if t.numel() and not t.is_cpu:
            return lazy_values(t).reshape(-1)
        n = storage_elements(t)
    if n == 0:
        return torch.empty(0, dtype=t.dtype)
    if is_whole_storage(t, n):  # no view needed: no device op but the copy
        host = _host_copy(t, t.dtype)
        return host if host.dim() == 1 or not flat else host.reshape(-1)
    whole = t.detach().as_strided((n,), (1,), 0)
    if whole.is_conj():
        whole = whole.conj()  # the raw bits; the bit is applied again on the CPU view
    if whole.is_neg():
        whole = whole._neg_view()
    return _host_copy(whole, t.dtype)


class LazyRunError(RuntimeError):
    """A storage-less (lazy) device raised while a tensor it returned was read back: its pending
    graph ran there, so the error is the device's, surfacing late (engine/runner.py records it
    as the case's `error` finding, never the harness's)."""


def lazy_values(t: torch.Tensor) -> torch.Tensor:
    """`t.cpu()` of a tensor without observable storage; its failure is `LazyRunError`."""
    try:
        return t.detach().cpu()
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        raise LazyRunError(f"{type(exc).__name__}: {text[0][:200] if text else ''}") from None


class ReadBackError(RuntimeError):
    """The whole-storage copy of a device result failed: nothing was compared (the case is an
    `error` of the harness, blamed on the broken copy if a probe finds one)."""


def read_back(t: torch.Tensor, storage: bool = False) -> torch.Tensor:
    """A CPU tensor with `t`'s values, size and strides (a view of a copy of its storage, or
    the copy itself where `t` is its whole storage and the copy has its strides).

    CPU tensors are returned as they are. Only tensors that have no storage of plain elements
    (sparse, quantized, opaque tensors of some backends, a lazy device's: `has_storage`) are
    read with the backend's own `t.cpu()`; a failed copy of a storage raises `ReadBackError`,
    never falls back to the backend's strided copy. `storage`: the device's tensors have
    observable storage (its profile says so), so an empty strided tensor, whose storage holds
    no bytes, has nothing to read: made on CPU without a call into the device."""
    if t.is_cpu:
        return plain(t)
    if t.layout != torch.strided or t.is_quantized:  # no single storage of plain elements
        return t.detach().cpu()
    n = _stored_elements(t)
    if n is None:  # opaque, a lazy device's (or empty): values only
        if storage and not t.numel():
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
        return lazy_values(t)
    try:
        if t.numel() and is_whole_storage(t, n):
            host = _host_copy(t, t.dtype)
            if host.stride() == t.stride():  # already shaped so: no view to rebuild
                return host
            host = host.reshape(-1)  # strides differ in a dim of size 1: rebuilt below
        else:
            host = read_storage(t)
    except (RuntimeError, NotImplementedError) as exc:
        text = str(exc).strip().splitlines()
        raise ReadBackError(
            f"reading the device result back (one contiguous device->host copy of its whole "
            f"storage) raised {type(exc).__name__}: {text[0][:160] if text else ''}"
        ) from None
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    view = host.as_strided(t.shape, t.stride(), t.storage_offset())
    if t.is_conj():
        view = view.conj()
    if t.is_neg():
        view = view._neg_view()
    return view
