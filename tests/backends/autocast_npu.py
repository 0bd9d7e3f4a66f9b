"""echo_npu with an `exp` of its own at AutocastPrivateUse1, registered from Python as a vendor
registers an autocast kernel (issue 80). CUDA's policy for exp is fp32: lower-precision inputs
are cast up and exp runs in float32. `AUTOCAST_NPU_FAULTS` (comma-separated, read at every
call) plants:
- `exp_zeros_for_half`: float16/bfloat16 inputs give float32 zeros;
- `exp_in_half`: exp runs in the input's precision and the result is cast up after.
Float32 inputs are right under both: only the inputs the policy exists for show them."""

import os
import warnings

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)

LOWER = (torch.float16, torch.bfloat16)
_BELOW = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def exp(self):
    faults = set(os.environ.get("AUTOCAST_NPU_FAULTS", "").split(","))
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        if self.dtype in LOWER and "exp_zeros_for_half" in faults:
            return torch.zeros(self.shape, dtype=torch.float32, device=self.device)
        if self.dtype in LOWER and "exp_in_half" in faults:
            return torch.exp(self).float()
        return torch.exp(self.float() if self.dtype in LOWER else self)


_lib = torch.library.Library("aten", "IMPL", "AutocastPrivateUse1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("exp", exp)
