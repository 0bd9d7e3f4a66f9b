"""echo_npu whose `abs` never returns for an input with no elements (planted hang).

Every other input gets abs computed on CPU and copied back, so only the zero-size case hangs.
The loop is plain Python: faulthandler's watchdog (a C thread) still fires while it holds the GIL.
With HANG_BACKEND_MARK set, the hanging process first writes its pid to that file, so a test
can tell the case is inside the hang (and which process holds it).
"""

import os
import warnings

import echo_npu  # noqa: F401  (registers the device)
import torch

_LIB = torch.library.Library("aten", "IMPL")


def _abs(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:
        if mark := os.environ.get("HANG_BACKEND_MARK"):
            with open(mark, "w") as f:
                f.write(str(os.getpid()))
        while True:
            pass
    return torch.ops.aten.abs.default(x.cpu()).to(x.device)


with warnings.catch_warnings():  # "overriding a previously registered kernel": on purpose
    warnings.simplefilter("ignore")
    _LIB.impl("abs", _abs, "PrivateUse1")
