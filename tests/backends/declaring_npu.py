"""echo_npu declaring its dtypes through `torch.accelerator.get_device_capability()` (issue 80),
as a backend on torch >= 2.10 does from its DeviceGuardImpl's `getDeviceCapability`: here the
function is replaced from Python, in every process that imports this module. It declares the
dtypes echo_npu allocates, copies and converts as CPU does; `DECLARING_NPU_FAULT` plants
`omits_bfloat16` (bfloat16 works, and is not declared) or `claims_int4` (int4 is declared; no
copy kernel exists for it, on the host either: not judged, so no difference)."""

import os

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)

HANDLED = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
    torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex32, torch.complex64, torch.complex128, torch.float8_e4m3fn,
    torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz, torch.float8_e8m0fnu,
}  # fmt: skip


def get_device_capability(device=None, /):
    declared = set(HANDLED)
    fault = os.environ.get("DECLARING_NPU_FAULT", "")
    if fault == "omits_bfloat16":
        declared.discard(torch.bfloat16)
    if fault == "claims_int4" and hasattr(torch, "int4"):
        declared.add(torch.int4)
    return {"supported_dtypes": declared}


torch.accelerator.get_device_capability = get_device_capability
