"""An op's autocast policy on one device, observed by running it: a sample of the op's OpInfo
(float32, on CPU) is run without autocast and inside an autocast region, with its floating inputs
as sampled (float32), in the region's lower precision, and mixed (the first lower, the rest
float32); the output dtypes say the class, as torch's policies (ATen/autocast_mode.h) define them:

- `lower`: float32 inputs give the lower precision (lower_precision_fp: matrix products, convs);
- `fp32`: lower-precision inputs give float32 (fp32, fp32_set_opt_dtype, fp32_append_dtype);
- `promote`: mixed inputs, which the op refuses or keeps apart without autocast, give float32;
- `none`: the region changes nothing the three runs can see;
- `error`: the op raises in the region and not without it (a banned op: binary_cross_entropy).

Where the device runs: `cpu` (torch.autocast on CPU tensors), `cuda` (fake CUDA tensors under
FakeTensorMode with CUDA's autocast switched on by torch.set_autocast_enabled: CUDA's own kernels
of AutocastCUDA decide, no GPU needed; `torch.autocast` itself refuses CUDA without one), or the
device under test (torch.autocast(device_type=...), its tensors placed by engine/transfer.py).
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.transfer import to_device

DESCRIBED = {
    "lower": "lower precision (float32 inputs cast down)",
    "fp32": "float32 (lower-precision inputs cast up)",
    "promote": "promote (mixed inputs run in the widest)",
    "none": "no cast",
    "error": "raises under autocast",
}


@dataclass(frozen=True)
class Observed:
    """What the runs of one sample showed on one device: the class and the evidence."""

    policy: str
    detail: str


@dataclass(frozen=True)
class Regime:
    """How to run on one device: place a CPU tensor there, and the autocast region."""

    device: str
    lower: torch.dtype
    place: Callable[[torch.Tensor], torch.Tensor]
    region: Callable[[], contextlib.AbstractContextManager]
    outer: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def cpu_regime(lower: torch.dtype) -> Regime:
    return Regime("cpu", lower, lambda t: t, lambda: torch.autocast("cpu", dtype=lower))


def device_regime(device: torch.device, lower: torch.dtype) -> Regime:
    def place(t: torch.Tensor) -> torch.Tensor:
        return to_device(t.detach().contiguous().clone(), device)

    return Regime(device.type, lower, place, lambda: torch.autocast(device.type, dtype=lower))


def cuda_regime(lower: torch.dtype = torch.float16) -> Regime:
    """CUDA's policy without a GPU: fake CUDA tensors, CUDA's autocast switched on by hand
    (its region's lower precision `lower`: float16, CUDA's default)."""
    import logging

    from torch._subclasses.fake_tensor import FakeTensorMode

    # a fake op that refuses its inputs logs its traceback before raising: the refusal is the
    # answer here (classified as "raises"), not an error of the run
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def place(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")

    return Regime("cuda", lower, place, lambda: _cuda_autocast(lower), lambda: mode)


@contextlib.contextmanager
def _cuda_autocast(lower: torch.dtype) -> Iterator[None]:
    was, dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", lower)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", was)
        torch.set_autocast_dtype("cuda", dtype)


def floating(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def inputs_of(sample: Any) -> tuple[Any, tuple, dict]:
    """An OpInfo sample's (input, args, kwargs)."""
    return sample.input, tuple(sample.args), dict(sample.kwargs)


def floating_inputs(sample: Any) -> int:
    """How many floating tensors a sample passes (what `run`'s dtypes convert, in order)."""
    return sum(1 for t in tree_flatten(inputs_of(sample))[0] if floating(t))


def cast_floats(values: Any, dtypes: list[torch.dtype]) -> Any:
    """`values` with each floating tensor converted to the next dtype of `dtypes`, in order
    (kept as they are past its end)."""
    next_dtype = itertools.chain(dtypes, itertools.repeat(None)).__next__

    def convert(t: Any) -> Any:
        if not floating(t):
            return t
        to = next_dtype()
        return t.detach().to(to) if to is not None else t.detach()

    return tree_map(convert, values)


def first_float(out: Any) -> torch.Tensor | None:
    return next((t for t in tree_flatten(out)[0] if floating(t)), None)


def run(op: Callable, sample: Any, regime: Regime, dtypes: list, autocast: bool) -> Any:
    """The op on the sample in `regime`, floating inputs converted to `dtypes` (in order),
    inside its autocast region or not: the result (on the regime's device)."""
    values = cast_floats(inputs_of(sample), dtypes)
    with regime.outer():
        placed = tree_map(lambda t: regime.place(t) if isinstance(t, torch.Tensor) else t, values)
        x, args, kwargs = placed
        region = regime.region() if autocast else contextlib.nullcontext()
        with region, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return op(x, *args, **kwargs)


def _dtype(op: Callable, sample: Any, regime: Regime, dtypes: list, autocast: bool) -> str:
    """The dtype of the first floating output ("raises: <Error>" where the op raises)."""
    try:
        out = first_float(run(op, sample, regime, dtypes, autocast))
    except Exception as exc:  # noqa: BLE001 - a refusal is an answer here
        return f"raises {type(exc).__name__}"
    return str(out.dtype).removeprefix("torch.") if out is not None else "no floating output"


def observe(op: Callable, sample: Any, regime: Regime) -> Observed:
    """The policy `regime`'s device shows for `op` on `sample` (see the module)."""
    n = floating_inputs(sample)
    f32, low = "float32", str(regime.lower).removeprefix("torch.")
    plain = _dtype(op, sample, regime, [torch.float32] * n, False)
    fp = _dtype(op, sample, regime, [torch.float32] * n, True)
    if fp.startswith("raises") and not plain.startswith("raises"):
        return Observed("error", f"float32 inputs: {fp} under autocast, {plain} without")
    if fp == low and plain == f32:
        return Observed("lower", f"float32 inputs give {low}")
    lowered = _dtype(op, sample, regime, [regime.lower] * n, True)
    if lowered == f32 and _dtype(op, sample, regime, [regime.lower] * n, False) != f32:
        return Observed("fp32", f"{low} inputs give float32")
    if n > 1:
        mixed = [regime.lower] + [torch.float32] * (n - 1)
        promoted = _dtype(op, sample, regime, mixed, True)
        if promoted == f32 and _dtype(op, sample, regime, mixed, False) != f32:
            return Observed("promote", f"{low} and float32 inputs give float32")
    return Observed("none", f"float32 inputs give {fp}, {low} inputs {lowered}")
