"""The `models` value set: the calls the model workloads made (engine/workloads.py, recorded in
`conformance/workloads/torch-<minor>-calls.jsonl` beside the golden list), rebuilt as CPU
tensors for a case's dtype. Integer and bool inputs keep their recorded values (indices, masks
and ids stay in range); floating values were never recorded and are regenerated in the op's
domain by tiling an ordinary sample's operand. Recorded float32 calls also serve float64,
float16 and bfloat16 cases, as a model run in that precision makes them."""

from __future__ import annotations

import functools
import math
import zlib
from typing import Any

import torch

from conformance.engine import workloads
from conformance.engine.calls import Call
from conformance.engine.discovery import resolve
from conformance.engine.operands import data_args

MAX_MODEL_CALLS = 4
RECORDED = torch.float32  # the precision the workloads run in
CONVERTED = (torch.float64, torch.float16, torch.bfloat16)  # also served by float32 calls
# overloads whose float32 dtype argument is the target of a conversion: a half-precision model
# makes the same upcast, so it stays (any other float32 dtype argument follows the operands:
# `input_dtype` of a backward, `_assert_tensor_metadata`'s, `empty_like`'s)
CONVERSIONS = frozenset({"to", "_to_copy"})


def has_model_calls(overload: str) -> bool:
    """Whether this torch's calls file (that of the nearest golden list) has a call of
    `overload`."""
    return overload in _recorded()


@functools.cache
def serves(overload: str, dtype: torch.dtype) -> bool:
    """Whether some recorded call of `overload` belongs to a case of `dtype` (read from the
    file, no tensor built: asked at collection for every overload and dtype)."""
    recorded = _recorded().get(overload)
    if not recorded:
        return False
    try:
        schema = resolve(overload)._schema
    except (AttributeError, RuntimeError):
        return False
    for encoded in recorded:
        found = _call_dtype(
            schema, encoded["args"], encoded.get("kwargs", {}), encoded.get("result")
        )
        if found == _name(dtype) or (found == _name(RECORDED) and dtype in CONVERTED):
            return True
    return False


@functools.cache
def _recorded() -> dict[str, list[dict]]:
    path = workloads.nearest_calls_path()
    if path is None:
        return {}
    with open(path) as f:
        return workloads.parse_calls(f.read())


def model_calls(overload: str, dtype: torch.dtype, ordinary: list[Call]) -> list[Call]:
    """The recorded calls of `overload` for a case of `dtype` (at most MAX_MODEL_CALLS, distinct
    by `Call.signature()`): those whose first tensor data operand (else result) has `dtype`, and
    for a floating `dtype` the float32 ones converted. Floating tensors are filled from the same
    operand of the first `ordinary` call that has a floating tensor there (tiled), else with
    seeded uniform values in [0.5, 1.5)."""
    recorded = _recorded().get(overload)
    if not recorded:
        return []
    try:
        schema = resolve(overload)._schema
    except (AttributeError, RuntimeError):
        return []  # (a neighbouring torch's file: this torch lacks the overload)
    out: list[Call] = []
    seen: set[str] = set()
    for index, encoded in enumerate(recorded):
        if len(out) == MAX_MODEL_CALLS:
            break
        call = _rebuilt(overload, schema, encoded, dtype, ordinary, index)
        if call is not None and call.signature() not in seen:
            seen.add(call.signature())
            out.append(call)
    return out


def _rebuilt(
    overload: str,
    schema: Any,
    encoded: dict,
    dtype: torch.dtype,
    ordinary: list[Call],
    index: int,
) -> Call | None:
    args, kwargs = encoded["args"], encoded.get("kwargs", {})
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if len(args) > len(positional) or not set(kwargs) <= {a.name for a in schema.arguments}:
        return None  # recorded with another schema
    recorded = _call_dtype(schema, args, kwargs, encoded.get("result"))
    if recorded != _name(dtype) and not (recorded == _name(RECORDED) and dtype in CONVERTED):
        return None
    build = _Builder(overload, dtype if recorded != _name(dtype) else None, ordinary, index)
    call = Call(
        overload,
        tuple(build(v, ("arg", i)) for i, v in enumerate(args)),
        {k: build(v, ("kwarg", k)) for k, v in kwargs.items()},
    )
    if build.convert is not None and not build.converted:
        return None  # nothing of float32 to convert (e.g. `full` in the default dtype)
    return call


def _call_dtype(schema: Any, args: list, kwargs: dict, result: str | None) -> str | None:
    """The dtype a recorded call belongs to: its first tensor data operand's, else its result's
    (a call without tensors), else its first tensor's (an out= argument)."""
    for position, arg in data_args(schema):
        value = args[position] if position < len(args) else kwargs.get(arg.name)
        tensor = _first_tensor(value)
        if tensor is not None:
            return tensor["tensor"]
    if result is not None:
        return result
    tensor = _first_tensor([args, list(kwargs.values())])
    return tensor["tensor"] if tensor is not None else None


def _first_tensor(value: Any) -> dict | None:
    if isinstance(value, dict) and "tensor" in value:
        return value
    if isinstance(value, list):
        for v in value:
            found = _first_tensor(v)
            if found is not None:
                return found
    return None


class _Builder:
    """Decodes one recorded call's arguments; with `convert`, float32 tensors (and dtype
    arguments, but those of CONVERSIONS) become `convert` and float scalars stay in its
    range."""

    def __init__(
        self, overload: str, convert: torch.dtype | None, ordinary: list[Call], index: int
    ) -> None:
        self.convert = convert
        self.converted = False
        self.ordinary = ordinary
        self.keeps_dtype = overload.partition(".")[0] in CONVERSIONS
        self.generator = torch.Generator().manual_seed(zlib.crc32(f"{overload}#{index}".encode()))

    def __call__(self, value: Any, slot: tuple[str, Any], element: int | None = None) -> Any:
        if isinstance(value, list):
            return [self(v, slot, j) for j, v in enumerate(value)]
        if isinstance(value, float):
            return self._scalar(value)
        if not isinstance(value, dict):
            return value  # None, bool, int, str
        if "tensor" in value:
            return self._tensor(value, slot, element)
        if "dtype" in value:
            dtype = getattr(torch, value["dtype"])
            if self.convert is not None and dtype == RECORDED and not self.keeps_dtype:
                self.converted = True
                return self.convert
            return dtype
        if "float" in value:
            return float(value["float"])
        if "complex" in value:
            return complex(*(self(v, slot) for v in value["complex"]))
        if "memory_format" in value:
            return getattr(torch, value["memory_format"])
        if "layout" in value:
            return getattr(torch, value["layout"])
        if "device" in value:
            return torch.device("cpu")
        raise ValueError(f"unknown recorded value {value!r}")

    def _scalar(self, value: float) -> float:
        if self.convert is None or not math.isfinite(value):
            return value
        info = torch.finfo(self.convert)  # e.g. finfo(float32).min as a mask fill: the model's
        return min(max(value, info.min), info.max)  # finfo(dtype).min in that precision

    def _tensor(self, encoded: dict, slot: tuple[str, Any], element: int | None) -> torch.Tensor:
        dtype = getattr(torch, encoded["tensor"])
        shape = encoded["shape"]
        if "values" in encoded:
            return torch.tensor(encoded["values"], dtype=dtype).reshape(shape)
        if dtype == torch.bool:  # values unknown (made inside a composite kernel): any mask
            return (torch.arange(math.prod(shape)) % 3 != 0).reshape(shape)
        if not (dtype.is_floating_point or dtype.is_complex):
            return torch.zeros(shape, dtype=dtype)  # an out= argument (inputs have values)
        if self.convert is not None and dtype == RECORDED:
            self.converted = True
            dtype = self.convert
        source = _source(self.ordinary, slot, element)
        count = math.prod(shape)
        if source is None or not count:
            values = torch.rand(count, generator=self.generator, dtype=torch.float64) + 0.5
        else:
            values = source.detach().reshape(-1).repeat(-(-count // source.numel()))[:count]
        return values.to(dtype).reshape(shape)


def _source(ordinary: list[Call], slot: tuple[str, Any], element: int | None) -> Any:
    """The floating tensor at `slot` (element `element` of a list) of the first ordinary call
    that has one there."""
    for call in ordinary:
        where, key = slot
        if where == "arg":
            value = call.args[key] if key < len(call.args) else None
        else:
            value = call.kwargs.get(key)
        if isinstance(value, list | tuple):
            floats = [v for v in value if _floating(v)]
            if floats:
                return floats[(element or 0) % len(floats)]
        elif _floating(value):
            return value
    return None


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
