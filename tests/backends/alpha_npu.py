"""echo_npu with an `add.Tensor` of its own (computed on the host, from Python) that rounds a
fractional `alpha` to an integer when `ALPHA_NPU_ROUNDS=1`: right for every alpha OpInfo's
sample_inputs use (1 and 2), wrong for the `alpha=-3.125` of its reference inputs, which only
the -reference cases run (issue 80). Unset, it adds as CPU does (the control)."""

import os
import warnings

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)


def add(self, other, *, alpha=1):
    if os.environ.get("ALPHA_NPU_ROUNDS") == "1" and isinstance(alpha, float):
        alpha = float(round(alpha))
    host = other.cpu() if isinstance(other, torch.Tensor) else other
    return torch.ops.aten.add.Tensor(self.cpu(), host, alpha=alpha).to(self.device)


_lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("add.Tensor", add)
