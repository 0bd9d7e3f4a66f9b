"""torch_xla with the save path of torch_xla <= 2.5 planted back (seed 004, issue 36).

That `xm.save` synced only the tensors being saved, as a step would
(`_xla_sync_multi(tensors, devices=[], wait=True, sync_xla_data=True)`): the sync may donate
an input buffer that a pending graph of another live tensor still needs, and the next step
fails on the deleted buffer. 2.9's `xm.save` syncs with `sync_xla_data=False`. Everything else
is plain torch_xla: `--backend xla_old_save` (this folder on PYTHONPATH) finds its `xla` device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch_xla
import torch_xla.core.xla_model as xm


def _to_cpu_old(data: Any, convert: bool = True) -> Any:
    """torch_xla 2.5's `_maybe_convert_to_cpu`: sync the selected tensors with their data."""

    def convert_fn(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True, sync_xla_data=True)
        if not convert:
            return tensors
        return torch_xla._XLAC._xla_get_cpu_tensors(tensors)

    def select_fn(v: Any) -> bool:
        return type(v) is torch.Tensor and xm.is_xla_tensor(v)

    return xm.ToXlaTensorArena(convert_fn, select_fn).transform(data)


def old_save(
    data: Any, file_or_path: Any, master_only: bool = True, global_master: bool = False
) -> None:
    """`xm.save` as torch_xla <= 2.5 had it."""
    should_write_data = not master_only or xm.is_master_ordinal(local=not global_master)
    cpu_data = _to_cpu_old(data, convert=should_write_data)
    if should_write_data:
        torch.save(cpu_data, file_or_path)


xm.save = old_save
