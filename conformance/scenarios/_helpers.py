"""Shared helpers of the scenarios: named steps, device-vs-CPU comparison."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import torch

from conformance.engine.transfer import has_storage

_LAST_STEP: list[str] = [""]


def step(name: str) -> None:
    """Record the step about to run: memory failures name it, and a crash log shows it."""
    _LAST_STEP[0] = name
    sys.stderr.write(f"[scenario step] {name}\n")
    sys.stderr.flush()


def last_step() -> str:
    return _LAST_STEP[0]


def reset_steps() -> None:
    _LAST_STEP[0] = ""


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def assert_same(device_value: Any, cpu_value: Any, what: str, atol=1e-5, rtol=1e-4) -> None:
    """Device result (moved to CPU) equals the CPU result: dtype, shape, values."""
    got = to_cpu(device_value)
    if isinstance(device_value, torch.Tensor) and device_value.device.type != "cpu":
        if has_storage(device_value) and (
            device_value.storage_offset() or not device_value.is_contiguous()
        ):
            what += (
                f" (device view with storage_offset {device_value.storage_offset()}, strides "
                f"{tuple(device_value.stride())}, copied to CPU by _copy_from)"
            )
    if isinstance(cpu_value, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: device gave {type(got)}, CPU a tensor"
        assert got.dtype == cpu_value.dtype, f"{what}: dtype {got.dtype} != CPU {cpu_value.dtype}"
        assert got.shape == cpu_value.shape, f"{what}: shape {got.shape} != CPU {cpu_value.shape}"
        strided = got.layout == cpu_value.layout == torch.strided
        if strided and torch.equal(got, cpu_value):
            return  # equal values pass any tolerance (assert_close's first call imports DTensor)
        torch.testing.assert_close(
            got,
            cpu_value,
            atol=atol,
            rtol=rtol,
            equal_nan=True,
            msg=lambda m: f"{what}: device result differs from CPU: {m}",
        )
    elif isinstance(cpu_value, (list, tuple)):
        assert len(got) == len(cpu_value), f"{what}: {len(got)} results != CPU {len(cpu_value)}"
        for i, (g, c) in enumerate(zip(got, cpu_value, strict=True)):
            assert_same(g, c, f"{what}[{i}]", atol, rtol)
    else:
        assert got == cpu_value, f"{what}: device gave {got!r}, CPU {cpu_value!r}"


def assert_on(value: Any, where: torch.device, what: str) -> None:
    """Every tensor of a result is on `where` (type and index)."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    for i, out in enumerate(values):
        if isinstance(out, torch.Tensor) and out.device != where:
            raise AssertionError(f"{what}: output {i} is on {out.device}, its inputs on {where}")


def on_both(fn: Callable[[torch.device], Any], device: torch.device, what: str, **tol) -> Any:
    """Run fn on CPU and on the device, compare, return the device result."""
    expected = fn(torch.device("cpu"))
    got = fn(device)
    assert_same(got, expected, what, **tol)
    return got


# the dispatcher's error when an op has no kernel for the device and no fallback takes it
_NO_KERNEL = re.compile(r"Could not run '([\w:.]+)' with arguments from the '(\w+)' backend")


def missing_op(exc: BaseException, device_type: str) -> str | None:
    """The aten op the device lacks, if `exc` (or its cause) is the dispatcher saying so."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        match = _NO_KERNEL.search(str(exc))
        if match and match.group(2).lower() in (device_type.lower(), "privateuse1"):
            return match.group(1)
        exc = exc.__cause__ or exc.__context__
    return None
