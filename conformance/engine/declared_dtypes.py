"""What a device declares of its dtypes against what it does: torch's
`torch.accelerator.get_device_capability()["supported_dtypes"]` (torch >= 2.10) is "the set of
dtypes for which tensors can be allocated on the accelerator and type conversion across supported
dtypes are supported". Each dtype CPU itself allocates, copies and converts is tried on the
device the same way (`tried`): allocated, copied from the host and back bit for bit, converted
to float32 on the device as CPU converts it. A declared dtype the device refuses, or a dtype it
handles that it does not declare, is a difference (`differences`); a dtype CPU cannot handle
this way is not judged.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch

from conformance.engine.transfer import read_back


def candidates() -> list[torch.dtype]:
    """Every dtype this torch names, in a stable order."""
    found = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return sorted(found, key=str)


def _round_trip(
    dtype: torch.dtype, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the host's bytes back from `device`, the float32 conversion made there)."""
    with warnings.catch_warnings():  # complex32 is "experimental"; a complex dtype's imaginary
        warnings.simplefilter("ignore")  # part is dropped in the conversion: as on CPU
        host = torch.arange(8).to(dtype)
        torch.empty(8, dtype=dtype, device=device)  # allocated empty
        placed = host.to(device)
        converted = placed.to(torch.float32)
    return _bytes(read_back(placed)), read_back(converted)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.element_size() else t


def tried(
    device: torch.device | str, dtypes: Iterable[torch.dtype] | None = None
) -> dict[torch.dtype, str]:
    """{dtype: "" (handled as CPU handles it) or why not}, for each dtype CPU handles."""
    out: dict[torch.dtype, str] = {}
    for dtype in dtypes if dtypes is not None else candidates():
        try:
            want_bytes, want_float = _round_trip(dtype, "cpu")
        except Exception:  # noqa: BLE001 - CPU does not handle it this way: not judged
            continue
        try:
            got_bytes, got_float = _round_trip(dtype, device)
        except Exception as exc:  # noqa: BLE001 - the device's refusal is the answer
            out[dtype] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:100]}"
            continue
        if not torch.equal(got_bytes, want_bytes):
            out[dtype] = "the host's values came back different"
        elif not torch.equal(got_float.view(torch.int32), want_float.view(torch.int32)):
            out[dtype] = "converted to float32 on the device, it differs from CPU's conversion"
        else:
            out[dtype] = ""
    return out


def differences(declared: Iterable[torch.dtype], handled: dict[torch.dtype, str]) -> list[str]:
    """What the declaration gets wrong: declared dtypes the device refuses (with why), and the
    dtypes it handles without declaring them ([] when they agree)."""
    declared = set(declared)
    name: Callable[[torch.dtype], str] = lambda d: str(d).removeprefix("torch.")  # noqa: E731
    refused = [f"{name(d)} ({why})" for d, why in handled.items() if d in declared and why]
    unsaid = [name(d) for d, why in handled.items() if d not in declared and not why]
    out = []
    if refused:
        out.append(f"declared but not handled: {', '.join(refused)}")
    if unsaid:
        out.append(f"handled but not declared: {', '.join(unsaid)}")
    return out
