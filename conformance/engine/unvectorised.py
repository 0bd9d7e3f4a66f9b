"""CPU's vectorised kernel against its own one-element call, where it gave NaN.

A pointwise kernel's SIMD path can return NaN where its scalar path and float64 give a number
(torch's vectorised float32 fmod at 3.4e38: nan; the same element alone: 0.01207). Such a NaN
would judge a device that is right. So when a sample of a pointwise op (torch's `pointwise` tag)
failed and CPU's result has NaNs, each of those elements is computed again by a one-element call
on the same values (fresh inputs, every tensor argument broadcast to the output and indexed
there): where that call gives a number, CPU disagrees with itself, the reference takes the
one-element value and the device is judged again against it. A device still wrong elsewhere
fails as before; a device right where CPU's SIMD path was not passes, with a torch-bug note.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import ieee
from conformance.engine.checks import Outcome
from conformance.engine.compare import unravel
from conformance.engine.placing import Materialized, PlacedCall

MAX_ELEMENTS = 256  # NaN elements recomputed per sample (more: the reference is left alone)


def fix_vectorised_nans(
    overload: str, reference: Any, placed: PlacedCall, expected: Outcome
) -> str | None:
    """Replace, in place, each NaN of CPU's result that CPU's one-element call computes as a
    number; how CPU disagreed with itself, or None (nothing replaced: the reference stands)."""
    if expected.exc is not None or not ieee.pointwise(overload):
        return None
    leaves = [t for t in tree_flatten(expected.result)[0] if isinstance(t, torch.Tensor)]
    targets = [(i, t) for i, t in enumerate(leaves) if t.is_floating_point() and t.numel()]
    fresh = placed.materialize("cpu")  # pristine inputs: each call gets clones of elements
    first = None
    fixed = 0
    for i, out in targets:
        nans = out.detach().isnan().reshape(-1).nonzero().reshape(-1)
        if not nans.numel():
            continue
        if nans.numel() > MAX_ELEMENTS:
            return None
        for flat in nans.tolist():
            index = tuple(unravel(flat, tuple(out.shape)))
            value = _one_element(reference, fresh, out.shape, index, i)
            if value is None or value != value:  # no call to make, or NaN there too
                continue
            with torch.no_grad():
                out[index] = value
            fixed += 1
            first = first or f"output {i} at {list(index)}: nan, alone {value:.7g}"
    if not fixed:
        return None
    return (
        f"cpu disagrees with itself: its vectorised kernel gives nan where the same element "
        f"alone gives a number ({fixed} element(s); {first}); judged against the one-element "
        "values"
    )


def _one_element(
    reference: Any, fresh: Materialized, shape: torch.Size, index: tuple[int, ...], leaf: int
) -> float | None:
    """Output `leaf` of a call on the element at `index` of every tensor argument of `fresh`,
    broadcast to the output (an argument that does not broadcast: no call, None)."""

    def element(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return x
        return x.broadcast_to(shape)[index].reshape(1).clone()

    try:
        args, kwargs = tree_map(element, fresh.args), tree_map(element, fresh.kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = reference(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not an elementwise call: no claim
        return None
    leaves = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
    if leaf >= len(leaves) or leaves[leaf].numel() != 1:
        return None
    return float(leaves[leaf].reshape(-1)[0])
