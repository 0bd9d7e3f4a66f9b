"""echo_npu with a `normal_` of its own, registered from Python (`torch.library`), drawing with
its standard deviation times `WIDE_NORMAL_FACTOR` (default 1.1): issue 43's example of a random
kernel whose draws look right sample by sample and whose spread is 10 % off. `1.0` draws as CPU
does (the control)."""

import os
import warnings

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)

FACTOR = float(os.environ.get("WIDE_NORMAL_FACTOR", "1.1"))


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    host = torch.empty(self.shape, dtype=self.dtype).normal_(mean, std * FACTOR)
    return self.copy_(host)


_lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("normal_", normal_)
