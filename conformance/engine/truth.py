"""The truth a last-bit check or a declared precision judges against: the op run on CPU with its
floating operands upcast to float64 (integer data operands converted to the result's dtype
first, as type promotion does), once per sample; for a float64 op, its correctly rounded
reference where it has one (exactness.FLOAT64_REFERENCES). Used by bits.py (rounding) and
precision.py (devices that compute half precision in itself)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import exactness, ieee
from conformance.engine.operands import data_args

ANY_NAME = "*"  # a reference that gives the one result every compared name reads


def float64_value(s: Any, result: torch.dtype, name: str) -> torch.Tensor | None:
    """The float64 truth of the value `name` (an output, "output 0", or a written argument) of
    sample `s` (checks.Sample) whose dtype is `result`; None where it cannot be computed."""
    if "float64" not in s.scratch:
        s.scratch["float64"] = _float64_run(s, result)
    found = s.scratch["float64"]
    return found.get(name, found.get(ANY_NAME))


def float64_value_scalars_rounded(s: Any, result: torch.dtype, name: str) -> torch.Tensor | None:
    """The float64 truth of `name` with every Python float operand first rounded to float32,
    the type a kernel computes a float32 or half result in (its opmath: CUDA's foreach and
    scalar kernels convert the Scalar so); None where the call has no such operand, for a
    float64 result, or where it cannot be computed. A kernel that rounds the scalar to its
    computation type, then rounds the result once, is as right as one that does not."""
    if result == torch.float64:
        return None
    if "float64-scalars" not in s.scratch:
        call = s.placed.call
        scalars = [v for v in (*call.args, *call.kwargs.values()) if isinstance(v, float)]
        changed = any(_rounded_scalar(v) != v for v in scalars)
        s.scratch["float64-scalars"] = _float64_run(s, result, _rounded_scalar) if changed else {}
    found = s.scratch["float64-scalars"]
    return found.get(name, found.get(ANY_NAME))


def _rounded_scalar(value: Any) -> Any:
    if isinstance(value, float):
        return float(torch.tensor(value, dtype=torch.float32))
    return value


def output_name(i: int, n: int) -> str:
    return f"output {i}" if n > 1 else "output"


def named(result: object, written: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{name as the checks name it: tensor} of a CPU run: its result's tensors, then the written
    arguments (`written`, by argument name)."""
    leaves = tree_flatten(result)[0]
    found = {
        output_name(i, len(leaves)): t for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)
    }
    for name, t in written.items():
        found.setdefault(name, t)
    return found


def _float64_run(s: Any, result: torch.dtype, scalar: Any = None) -> dict[str, torch.Tensor]:
    cpu = s.placed.materialize("cpu")
    if scalar is not None:  # the same placed tensors, each top-level scalar operand changed
        cpu.args = tuple(scalar(a) for a in cpu.args)
        cpu.kwargs = {k: scalar(v) for k, v in cpu.kwargs.items()}
    reference = exactness.FLOAT64_REFERENCES.get(ieee.base(s.overload))
    if result == torch.float64 and reference is not None:
        self = cpu.args[0] if cpu.args and isinstance(cpu.args[0], torch.Tensor) else None
        if self is None or self.dtype != torch.float64:
            return {}
        return {ANY_NAME: reference(self)}
    data = {i for i, _ in data_args(s.schema)}
    args, kwargs = exactness.wide_args(cpu.args, cpu.kwargs, data, result)
    upcast = {
        id(o): w
        for o, w in zip(
            tree_flatten((cpu.args, cpu.kwargs))[0], tree_flatten((args, kwargs))[0], strict=True
        )
        if isinstance(o, torch.Tensor) and isinstance(w, torch.Tensor)
    }
    out = exactness.run_quietly(s.spec.reference or s.op, args, kwargs)
    if out is None:  # no truth for this sample: nothing claimed
        return {}
    written = {name: upcast[id(view)] for name, view in cpu.written() if id(view) in upcast}
    return named(out, written)
