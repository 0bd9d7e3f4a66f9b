"""echo_npu with one kernel that compiles on first use, as JIT backends do (torch-mojo-backend:
12-34 s per kernel): `abs` registered for PrivateUse1 with `torch.library` sleeps
`JIT_BACKEND_COMPILE_S` seconds (default 1.5) on its first call in each process, then computes
as CPU does. For the first-call timing of issue 45 (`first_call_s`, the summary's line)."""

from __future__ import annotations

import os
import time

import echo_npu  # noqa: F401  (registers the device)
import torch

_lib = torch.library.Library("aten", "IMPL")
_compiled: set[int] = set()


def _abs(self: torch.Tensor) -> torch.Tensor:
    if os.getpid() not in _compiled:  # a forked runner compiles again: its own process
        time.sleep(float(os.environ.get("JIT_BACKEND_COMPILE_S", "1.5")))
        _compiled.add(os.getpid())
    return torch.abs(self.cpu()).to(self.device)


_lib.impl("abs", _abs, "PrivateUse1")
