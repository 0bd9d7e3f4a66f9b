"""What torch answers about a device type without touching it: its dispatch key and whether
kernels live there, the in-tree device types with kernels in this process, the c10d backend
torch.distributed maps it to, and the torch.compile backend its -compile cases use."""

from __future__ import annotations

import torch


def collectives_for(device_type: str) -> str | None:
    """The c10d backend torch.distributed maps the device type to, if any."""
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return None
        return dist.Backend.default_device_backend_map.get(device_type)
    except Exception:  # noqa: BLE001 - a torch without distributed: none
        return None


def compiler_for(device_type: str) -> str:
    """`inductor` where the device has an Inductor backend (also one whose classes fail to load:
    each -compile case then fails with that error), else `aot_eager`."""
    module = getattr(torch, device_type, None)
    try:
        if getattr(module, "Scheduling", None) is not None:
            return "inductor"
    except Exception:  # noqa: BLE001 - it offers one that fails to load: the cases show how
        return "inductor"
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

    init_backend_registration()
    return "inductor" if get_scheduling_for_device(device_type) is not None else "aot_eager"


#: device types torch names itself whose kernels live under their own dispatch key
IN_TREE = ("xla", "hpu", "xpu", "mtia", "maia", "ipu", "lazy", "mps", "cuda")


def dispatch_key_of(device: str) -> str | None:
    """The backend dispatch key of a device type (`xla` -> `XLA`, the PrivateUse1 name ->
    `PrivateUse1`), asked of torch without touching the device; None for an unknown type."""
    try:
        torch.device(device)
    except RuntimeError:
        return None
    if device == torch._C._get_privateuse1_backend_name():
        return "PrivateUse1"
    find = getattr(torch._C, "_dispatch_key_for_device", None)
    key = find(device) if find is not None else device.upper()
    return key if hasattr(torch._C.DispatchKey, key) else None


def has_kernels(key: str) -> bool:
    """Whether anything registered aten kernels or a boxed fallback under `key`."""
    if torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, key)):
        return True
    return any(
        q.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(q, key)
        for q in torch._C._dispatch_get_registrations_for_dispatch_key(key)
    )


def in_tree_devices() -> list[str]:
    """The in-tree device types (IN_TREE) whose dispatch key has kernels in this process."""
    return [d for d in IN_TREE if (key := dispatch_key_of(d)) is not None and has_kernels(key)]
