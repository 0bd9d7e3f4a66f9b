"""echo_npu's c10d backend ``echo``: collectives for the ``npu`` device, as HCCL or XCCL are
for theirs, implemented in Python on the c10d Store.

``torch.distributed.Backend.register_backend("echo", _create, devices=[<device>])`` runs when
echo_npu registers its device, so ``init_process_group(backend="echo")`` (or
``"cpu:gloo,npu:echo"``) builds an :class:`EchoProcessGroup`. Torch's C++ ``Backend`` cannot be
subclassed from Python (its binding has no constructor); a Python ``ProcessGroup`` subclass can
(``PyProcessGroup``), and ``_new_process_group_helper`` then uses the returned group as the
whole process group (so with ``"cpu:gloo,npu:echo"`` echo serves CPU tensors too).

How data moves: every collective takes the next sequence number of its group (in the calling
thread, so every rank numbers its collectives alike) and runs on the group's worker thread, in
order. Each rank reads its inputs from the device to the host, publishes them in the Store under
``<seq>/<rank>`` (or ``<seq>/<src>><dst>`` for the per-destination pieces of scatter,
reduce_scatter and alltoall), waits for the keys it needs (the group's timeout), reduces on the
host in rank order 0, 1, ..., n-1 with torch's CPU ops in the tensor's dtype, and copies the
results back into the device tensors in place (``copy_``, so strided outputs and views are
written through). Every rank then counts itself in ``<seq>/done``; the last one deletes the
keys. Point-to-point messages use ``p2p/<src>><dst>/<tag>/<n>`` (n counts the messages of that
pair and tag), published at ``send`` and read (then deleted) by ``recv``'s own thread.

Faults (``ECHO_NPU_FAULTS`` / ``echo_npu.set_faults``, names ``ccl_*`` in faults.def) are read
at each call; see docs/BACKEND.md ("c10d backend").

Modules: ``base`` (worker, Store exchange, point-to-point, coalescing), ``group`` (the
collectives), ``hostdata`` (bytes, reductions, data faults), ``store``, ``work``.

Works on torch 2.0+ (``ProcessGroup`` subclasses from Python and ``register_backend`` exist
since 1.13; ``devices=`` is passed only when the installed signature has it).
"""

from __future__ import annotations

import inspect

import torch.distributed as dist

from .base import BACKEND_NAME, EARLY_WAIT_DELAY_S
from .group import EchoProcessGroup
from .hostdata import AVG_TWICE_SIZES
from .work import EchoWork

__all__ = [
    "AVG_TWICE_SIZES",
    "BACKEND_NAME",
    "EARLY_WAIT_DELAY_S",
    "EchoProcessGroup",
    "EchoWork",
    "register_backend",
]


def _create(store, rank, size, timeout):
    return EchoProcessGroup(store, rank, size, timeout)


def register_backend(device: str) -> None:
    """Register ``echo`` with torch.distributed for ``device`` (idempotent)."""
    backend = dist.Backend
    if BACKEND_NAME.upper() in getattr(backend, "_plugins", {}):
        _map_device(device)
        return
    params = inspect.signature(backend.register_backend).parameters
    if "devices" in params:
        backend.register_backend(BACKEND_NAME, _create, devices=[device])
    else:
        backend.register_backend(BACKEND_NAME, _create)
    _map_device(device)


def _map_device(device: str) -> None:
    backend = dist.Backend
    device_map = getattr(backend, "default_device_backend_map", None)
    if device_map is not None:
        device_map[device] = BACKEND_NAME
    capability = getattr(backend, "backend_capability", None)
    if capability is not None:
        devices = capability.setdefault(BACKEND_NAME, [])
        if device not in devices:
            devices.append(device)
