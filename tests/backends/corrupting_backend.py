"""echo_npu whose `neg` returns correct values but leaves the process "corrupted": the next
`relu` call of the process aborts with glibc's words (planted, deterministic version of
a kernel that writes past its output and a later malloc that notices).

Models the seed report: the op that did the damage passes its own checks; the crash lands in
another op's case, only when that case runs after it in the same process.
"""

import os
import sys
import warnings

import echo_npu  # noqa: F401  (registers the device)
import torch

_LIB = torch.library.Library("aten", "IMPL")
_STATE = {"corrupted": False}


def _neg(x: torch.Tensor) -> torch.Tensor:
    _STATE["corrupted"] = True
    return torch.ops.aten.neg.default(x.cpu()).to(x.device)


def _checked(op):
    def kernel(x: torch.Tensor) -> torch.Tensor:
        if _STATE["corrupted"]:
            sys.stderr.write("free(): invalid pointer\n")
            sys.stderr.flush()
            os.abort()
        return op(x.cpu()).to(x.device)

    return kernel


with warnings.catch_warnings():  # "overriding a previously registered kernel": on purpose
    warnings.simplefilter("ignore")
    _LIB.impl("neg", _neg, "PrivateUse1")
    _LIB.impl("relu", _checked(torch.ops.aten.relu.default), "PrivateUse1")
