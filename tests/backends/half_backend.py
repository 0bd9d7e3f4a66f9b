"""echo_npu with two kernels that compute float16/bfloat16 in the dtype itself, as devices with
half-precision units do (issue 45: the manifest's `computes_in_dtype`).

`addcmul` (self + value * t1 * t2, each step rounded to the dtype) and `sum.dim_IntList` (a running
sum in the dtype, one rounding per element) are registered for PrivateUse1 with `torch.library`
over echo_npu's own kernels; other dtypes compute as CPU does. Their half results are a few ulps
from CPU's, which computes in float32 and rounds once. Planted bugs, by `HALF_BACKEND_BUG`:

- `1`: both also drop the last four bits of every half result: beyond what computing in the
  dtype explains;
- `sign`: addcmul flips the sign of every half result below 1/32 of its largest input: wrong
  where the result and its own operands are small, hidden by a bound at the largest input's
  scale (issue 56);
- `copy`: `cat` (registered here too, a copy otherwise) clears the lowest bit of every half
  value: a data-movement op computes nothing in any precision, so no declaration excuses it.
"""

from __future__ import annotations

import os

import echo_npu  # noqa: F401  (registers the device)
import torch

HALF = (torch.float16, torch.bfloat16)
_lib = torch.library.Library("aten", "IMPL")


BUG = os.environ.get("HALF_BACKEND_BUG", "")


def _finish(result: torch.Tensor, device: torch.device) -> torch.Tensor:
    if result.dtype in HALF and BUG == "1":
        bits = result.view(torch.int16)
        result = (bits & ~15).view(result.dtype)  # four bits of the significand gone
    return result.to(device)


def _addcmul(
    self: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor, *, value: object = 1
) -> torch.Tensor:
    device = self.device
    a, b, c = (t.cpu() for t in (self, tensor1, tensor2))
    if torch.result_type(a, b) not in HALF:
        return torch.addcmul(a, b, c, value=value).to(device)
    product = b * c  # CPU rounds each elementwise op of a half tensor to the dtype
    result = a + product * value
    if BUG == "sign":
        largest = max(float(t.abs().max()) for t in (a, b, c) if t.numel())
        result = torch.where(result.abs() < largest / 32, -result, result)
    return _finish(result, device)


def _cat(tensors: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    device = tensors[0].device
    result = torch.cat([t.cpu() for t in tensors], dim)
    if BUG == "copy" and result.dtype in HALF:
        result = (result.view(torch.int16) & ~1).view(result.dtype)
    return result.to(device)


def _sum(
    self: torch.Tensor, dim: list[int] | None, keepdim: bool = False, *, dtype: object = None
) -> torch.Tensor:
    device = self.device
    x = self.cpu()
    if dtype is not None or x.dtype not in HALF or not dim:
        return torch.sum(x, dim, keepdim, dtype=dtype).to(device)
    if x.dim() == 0:
        return _finish(x.clone(), device)
    dims = sorted({d % x.dim() for d in dim})
    rest = [n for i, n in enumerate(x.shape) if i not in dims]
    flat = x.movedim(dims, list(range(len(dims)))).reshape(-1, *rest)
    total = torch.zeros(rest, dtype=x.dtype)
    for row in flat:  # one rounding to the dtype per element added
        total = total + row
    if keepdim:
        total = total.reshape([1 if i in dims else n for i, n in enumerate(x.shape)])
    return _finish(total, device)


_lib.impl("addcmul", _addcmul, "PrivateUse1")
_lib.impl("sum.dim_IntList", _sum, "PrivateUse1")
_lib.impl("cat", _cat, "PrivateUse1")
