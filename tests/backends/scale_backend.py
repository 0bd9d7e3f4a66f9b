"""echo_npu plus generated kernels for about 1,400 more aten overloads: a backend of the size real
NPU backends reach (1,000-2,000 registered overloads), for `bench/bench_scale.py`.

Importing registers echo_npu (device, allocator, its own kernels, cpu_fallback, protocol hooks),
then through `torch.library` one PrivateUse1 kernel per overload of `scale_overloads.txt` that
this torch declares and that has no PrivateUse1 kernel yet. Each kernel is CPU-as-device: the
whole storage of every device argument is copied to CPU, the overload runs on CPU on tensors
with the same sizes, strides and offsets, written storages are copied back and results are
copied to the device with their strides. Transfers use only echo_npu's own kernels (`empty`,
`_copy_from`, `set_`), never a generated one. The kernels compute what CPU computes on the same
memory, so a run costs what the suite costs at this size; it judges no backend bug. The
generated overloads are not routable through cpu_fallback (echo_npu's `set_fallback_routes`
accepts its own kernels only): their cases run on the native path.

The list holds what echo_npu serves through its boxed fallback or torch's default kernel, has
samples in the suite's sample sources for a default dtype, and is not a view (a view kernel
returns an alias, which a copy to CPU cannot be) nor `copy_`/`_to_copy` (the harness's own
transfers: kept on torch's kernels so the bench times the suite, not these kernels). Regenerate
after a torch upgrade (builds samples for every candidate: minutes with cold caches):

    PYTHONPATH=tests/backends:backend python tests/backends/scale_backend.py --write-list
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import echo_npu  # noqa: F401  (registers the device)
import torch
from torch.utils._pytree import tree_flatten, tree_map

LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale_overloads.txt")
KEY = "PrivateUse1"
NOT_GENERATED = ("copy_", "_to_copy")  # the harness's transfers (transfer.py) go through them


class _Call:
    """One call of a generated kernel: CPU mirrors of the device storages it reads."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.host: dict[Any, tuple[torch.UntypedStorage, torch.Tensor]] = {}
        self.mirrors: list[tuple[torch.Tensor, torch.Tensor, Any]] = []  # device, CPU, key

    def to_host(self, x: Any) -> Any:
        if isinstance(x, torch.device) and x.type == self.device:
            return torch.device("cpu")
        if not isinstance(x, torch.Tensor) or x.device.type != self.device:
            return x
        storage = x.untyped_storage()
        key = storage.data_ptr() if storage.nbytes() else id(x)
        if key not in self.host:
            host = torch.empty(storage.nbytes(), dtype=torch.uint8)
            if storage.nbytes():
                torch.ops.aten._copy_from(_bytes(storage, self.device), host)
            self.host[key] = (storage, host)
        mirror = torch.empty(0, dtype=x.dtype).set_(
            self.host[key][1].untyped_storage(), x.storage_offset(), x.size(), x.stride()
        )
        torch._C._set_conj(mirror, x.is_conj())
        torch._C._set_neg(mirror, x.is_neg())
        self.mirrors.append((x, mirror, key))
        return mirror

    def write_back(self, written: Iterable[torch.Tensor]) -> None:
        """Copy the storages of the written device arguments back; follow a resize or set_."""
        done = set()
        ids = {id(t) for t in written}
        for device, mirror, key in self.mirrors:
            if id(device) not in ids:
                continue
            storage, host = self.host[key]
            now = mirror.untyped_storage()
            if now.data_ptr() == host.untyped_storage().data_ptr() and now.nbytes() == (
                storage.nbytes()
            ):
                if key not in done and storage.nbytes():
                    torch.ops.aten._copy_from(host, _bytes(storage, self.device))
                done.add(key)
                target = storage
            else:  # resized or re-pointed on CPU: new device memory, as a device kernel would
                target = self._to_device_storage(now)
            if not device.is_inference():  # as CPU's kernels, whose inner writes bump it
                torch.autograd.graph.increment_version(device)
            if (device.size(), device.stride(), device.storage_offset()) != (
                mirror.size(),
                mirror.stride(),
                mirror.storage_offset(),
            ) or target is not storage:
                device.set_(target, mirror.storage_offset(), mirror.size(), mirror.stride())

    def _to_device_storage(self, storage: torch.UntypedStorage) -> torch.UntypedStorage:
        out = torch.empty(storage.nbytes(), dtype=torch.uint8, device=self.device)
        if storage.nbytes():
            host = torch.empty(0, dtype=torch.uint8).set_(storage)
            torch.ops.aten._copy_from(host, out)
        return out.untyped_storage()

    def to_device(self, result: Any, keep_on_host: bool) -> Any:
        """The CPU result as device tensors: an argument returned is that argument, a view of
        an argument's storage a view of the device storage, anything else copied."""
        by_mirror = {id(m): d for d, m, _ in self.mirrors}
        by_ptr = {h.untyped_storage().data_ptr(): s for s, h in self.host.values() if s.nbytes()}
        made: dict[int, torch.UntypedStorage] = {}

        def convert(r: Any) -> Any:
            if not isinstance(r, torch.Tensor) or r.device.type != "cpu" or keep_on_host:
                return r
            if id(r) in by_mirror:
                return by_mirror[id(r)]
            if r.layout != torch.strided:
                raise NotImplementedError(f"scale_backend: a {r.layout} result")
            ptr = r.untyped_storage().data_ptr()
            storage = by_ptr.get(ptr) if ptr else None
            if storage is None:
                if not ptr or ptr not in made:
                    made[ptr] = self._to_device_storage(r.untyped_storage())
                storage = made[ptr]
            out = torch.empty(0, dtype=r.dtype, device=self.device).set_(
                storage, r.storage_offset(), r.size(), r.stride()
            )
            torch._C._set_conj(out, r.is_conj())
            torch._C._set_neg(out, r.is_neg())
            return out

        return tree_map(convert, result)


def _bytes(storage: torch.UntypedStorage, device: str) -> torch.Tensor:
    """The whole device storage as a 1-D uint8 device tensor."""
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage)


def kernel(op: torch._ops.OpOverload, device: str):
    """The CPU-as-device kernel of `op`."""
    schema = op._schema
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info and a.alias_info.is_write]
    names = [a.name for a in schema.arguments]
    has_device = any(str(a.type) in ("Device", "Optional[Device]") for a in schema.arguments)

    def run(*args: Any, **kwargs: Any) -> Any:
        call = _Call(device)
        host_args, host_kwargs = tree_map(call.to_host, (args, kwargs))
        result = op(*host_args, **host_kwargs)
        bound = {**dict(zip(names, args, strict=False)), **kwargs}
        targets = [bound[names[i]] for i in written if names[i] in bound]
        call.write_back(t for t in tree_flatten(targets)[0] if isinstance(t, torch.Tensor))
        asked = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.device)]
        keep_on_host = has_device and any(d.type != device for d in asked)
        return call.to_device(result, keep_on_host)

    return run


def listed() -> list[str]:
    if not os.path.exists(LIST):  # before the first --write-list
        return []
    with open(LIST) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def _resolve(overload: str) -> torch._ops.OpOverload | None:
    name, _, ov = overload.partition(".")
    try:
        return getattr(getattr(torch.ops.aten, name), ov or "default")
    except (AttributeError, RuntimeError):
        return None  # not declared by this torch


def register() -> tuple[torch.library.Library, list[str]]:
    """Register the listed overloads this torch declares and nobody serves yet."""
    device = torch._C._get_privateuse1_backend_name()
    lib = torch.library.Library("aten", "IMPL")
    done = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for overload in listed():
            op = _resolve(overload)
            if op is None or torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), KEY):
                continue
            lib.impl(overload, kernel(op, device), KEY)
            done.append(overload)
    return lib, done


_LIB, GENERATED = register()  # the library object keeps the kernels registered


def candidates() -> list[str]:
    """Overloads echo_npu serves through its fallback or torch's default kernel, no views."""
    from conformance.engine import discovery

    kinds = (discovery.FALLBACK, discovery.DEFAULT_KERNEL)
    out = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name[len("aten::") :]
        overload = f"{name}.{schema.overload_name}" if schema.overload_name else name
        view = any(r.alias_info and not r.alias_info.is_write for r in schema.returns)
        if view or name in NOT_GENERATED or overload in GENERATED:
            continue
        if discovery.how_reached(overload) in kinds:
            out.append(overload)
    return sorted(set(out) | set(GENERATED))


def write_list(cache_dir: str) -> None:
    """Keep the candidates with samples for a default dtype (the suite's sample sources)."""
    from conformance.harness.options import DEFAULT_DTYPES, parse_dtypes
    from conformance.samples import calls_for

    dtypes = parse_dtypes(DEFAULT_DTYPES)
    kept = []
    names = candidates()
    for i, overload in enumerate(names):
        for dtype in dtypes:
            try:
                if calls_for(overload, dtype, cache_dir):
                    kept.append(overload)
                    break
            except Exception:  # noqa: BLE001 - a sample source that fails: not listed
                break
        print(f"\r{i + 1}/{len(names)} {len(kept)} kept", end="", file=sys.stderr, flush=True)
    with open(LIST, "w") as f:
        f.write(f"# generated by scale_backend.py --write-list with torch {torch.__version__}\n")
        f.write("".join(f"{o}\n" for o in kept))
    print(f"\n{len(kept)} overloads written to {LIST}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--write-list"]:
        sys.exit("usage: python tests/backends/scale_backend.py --write-list [CACHE_DIR]")
    write_list(sys.argv[2] if len(sys.argv) > 2 else ".pytest_cache/d/conformance")
