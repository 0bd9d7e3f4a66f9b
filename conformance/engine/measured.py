"""A value computed by many kernels (a module's step, an autocast region) against CPU's, judged by
evidence (engine/evidence.py): the dtype's base tolerance plus `OWN_ERROR` times CPU's own
distance from the same computation in float64, per region of `REGION` neighbours. A value
outside that allowance still passes where it is as close to the float64 truth as CPU's (a kernel
more accurate than CPU's is no failure), or within a tolerance torch itself declares for the
comparison (`declared`: the caller notes it). Without a truth: `NO_TRUTH_SCALE` times the base.
Integer values are exact."""

from __future__ import annotations

from typing import Any

import torch

from conformance.engine.compare import TOLERANCES, ErrorStats, Mismatch, compare_values
from conformance.engine.evidence import OWN_ERROR, Evidence, element_errors, regions

NO_TRUTH_SCALE = 4.0  # times the base tolerance, where no float64 run measured CPU's own error


def compare_value(
    check: str,
    name: str,
    actual: Any,
    expected: Any,
    truth: Any,
    values: bool = True,
    declared: tuple[float, float] | None = None,
) -> bool:
    """Raise Mismatch(`check`) unless `actual` matches CPU's `expected` (see the module); False
    where it passed only within the `declared` (rtol, atol); `values` off: dtype and shape only."""
    if not isinstance(expected, torch.Tensor):
        if actual != expected:
            raise Mismatch(check, f"{name}: the device gives {actual!r}, CPU {expected!r}")
        return True
    if not isinstance(actual, torch.Tensor):
        raise Mismatch(check, f"{name}: the device gives {type(actual).__name__}, CPU a tensor")
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise Mismatch(
            check,
            f"{name}: the device gives {actual.dtype} {list(actual.shape)}, CPU "
            f"{expected.dtype} {list(expected.shape)}",
        )
    if not values:
        return True
    scale: Any = NO_TRUTH_SCALE
    has_truth = isinstance(truth, torch.Tensor) and truth.shape == expected.shape
    if has_truth:
        scale = Evidence({}, {name: OWN_ERROR * regions(element_errors(expected, truth))})
    try:
        compare_values(name, actual, expected, scale, ErrorStats())
    except Mismatch as exc:
        if has_truth and as_accurate(actual, expected, truth):
            return True
        if declared is not None and torch.allclose(
            actual, expected, rtol=declared[0], atol=declared[1], equal_nan=True
        ):
            return False
        raise Mismatch(check, exc.message, exc.max_abs, exc.max_rel) from None
    return True


def as_accurate(actual: torch.Tensor, expected: torch.Tensor, truth: torch.Tensor) -> bool:
    """Whether the device's value is as close to the float64 truth as CPU's, element by element
    (within the dtype's base tolerance plus `OWN_ERROR` times CPU's own error in the region)."""
    if not expected.is_floating_point() or expected.dtype not in TOLERANCES:
        return False
    rtol, atol = TOLERANCES[expected.dtype]
    own = element_errors(actual, truth)
    bound = atol + OWN_ERROR * regions(element_errors(expected, truth))
    bound = bound + rtol * truth.detach().to(torch.float64).abs()
    finite = torch.isfinite(actual) == torch.isfinite(expected)
    return bool(((own <= bound) & finite).all())
