"""torch's own lazy device (torch._lazy on its TorchScript backend), with faults to plant.

`--backend lazy_backend:register --device lazy`: a device whose tensors have no observable
storage, whose ops run at a sync point (`torch._lazy.mark_step()`) and whose runtime counts
the ops that fell back to CPU (`aten::<op>` counters) - the shape of torch_xla, in every torch
wheel, so the lazy-device code paths are tested without installing torch_xla.

Faults (environment switches, never the default):
- LAZY_PLANT_SELECT_SCATTER=1: a write through a `select` view lands one row further on
  (`select_scatter`, which functionalization uses to write a view back into its base).
- LAZY_PLANT_BREAK_RUNTIME=1: `cosh` breaks the runtime of its process: every later sync
  raises, as torch_xla's does after some failed graphs ("Check failed: tensor_data").
- LAZY_PLANT_CRASH_AFTER_COSH=1: once `cosh` ran, the process's next `mul` on the device dies
  of SIGSEGV (cosh's own cases call no `mul`): a crash after a case's checks, in its runner's
  check that the device still works, as torch_xla's GRU cases crash in the sync of the graph
  they left pending.
"""

from __future__ import annotations

import os
import signal

import torch

_LIBRARIES: list[torch.library.Library] = []  # kept alive: a dropped Library unregisters


def register() -> None:
    """Start torch._lazy's TorchScript backend and plant the faults the environment asks for."""
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()
    if os.environ.get("LAZY_PLANT_SELECT_SCATTER") == "1":
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("select_scatter", _select_scatter_one_row_on, "Lazy")
        _LIBRARIES.append(lib)
    if os.environ.get("LAZY_PLANT_BREAK_RUNTIME") == "1":
        _break_runtime_at_cosh()
    if os.environ.get("LAZY_PLANT_CRASH_AFTER_COSH") == "1":
        _crash_after_cosh()


def _crash_after_cosh() -> None:
    ran: list[bool] = []

    def cosh(x: torch.Tensor) -> torch.Tensor:
        ran.append(True)
        return torch.ops.aten.cosh.default(x.cpu()).to(x.device)

    def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if ran:
            os.kill(os.getpid(), signal.SIGSEGV)
        return torch.ops.aten.mul.Tensor(x.cpu(), y.cpu()).to(x.device)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("cosh", cosh, "Lazy")
    lib.impl("mul.Tensor", mul, "Lazy")
    _LIBRARIES.append(lib)


def _break_runtime_at_cosh() -> None:
    import torch._lazy

    broken: list[bool] = []
    mark_step = torch._lazy.mark_step

    def cosh(x: torch.Tensor) -> torch.Tensor:
        broken.append(True)
        return torch.ops.aten.cosh.default(x.cpu()).to(x.device)

    def checked_mark_step(*args, **kwargs) -> None:
        if broken:
            raise RuntimeError("Check failed: tensor_data: (planted: the runtime is broken)")
        mark_step(*args, **kwargs)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("cosh", cosh, "Lazy")
    _LIBRARIES.append(lib)
    torch._lazy.mark_step = checked_mark_step


def _select_scatter_one_row_on(
    self: torch.Tensor, src: torch.Tensor, dim: int, index: int
) -> torch.Tensor:
    wrong = (index + 1) % self.size(dim)
    cpu = torch.ops.aten.select_scatter.default(self.cpu(), src.cpu(), dim, wrong)
    return cpu.to(self.device)
