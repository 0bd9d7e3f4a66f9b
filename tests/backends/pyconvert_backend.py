"""echo_npu with a `_to_copy` of its own, written in Python (`torch.library`), as a backend that
converts dtypes in a Python wrapper does: the conversion is CPU's (`PYCONVERT_TRUNCATE_BF16=1`:
a float -> bfloat16 conversion that truncates the mantissa instead of rounding to nearest even,
issue 37's example), the move to the device echo_npu's own copy."""

import os
import warnings

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)

TRUNCATE = os.environ.get("PYCONVERT_TRUNCATE_BF16") == "1"


def _truncated(t: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 by dropping the low 16 bits (no rounding)."""
    bits = t.to(torch.float32).contiguous().view(torch.int32)
    keep = torch.where(t.isnan(), bits, bits & ~0xFFFF)
    return (keep.view(torch.float32)).to(torch.bfloat16)  # exact: the low bits are zero


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):  # fmt: skip
    target = dtype or self.dtype
    # the result's strides as CPU's _to_copy gives them (asked of a meta tensor)
    meta = torch.empty_strided(self.shape, self.stride(), dtype=self.dtype, device="meta")
    strides = torch.ops.aten._to_copy(meta, dtype=target, memory_format=memory_format).stride()
    # moved with copy_ (echo_npu's _copy_from): `.cpu()` and `.to(device)` would call this
    host = torch.empty(self.shape, dtype=self.dtype).copy_(self)
    if TRUNCATE and target == torch.bfloat16 and host.is_floating_point():
        converted = _truncated(host)
    else:
        converted = host.to(target)
    out = torch.empty_strided(self.shape, strides, dtype=target, device=device or self.device)
    return out.copy_(converted)


_lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("_to_copy", _to_copy)
