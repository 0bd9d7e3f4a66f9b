"""The buffer check of a written argument (write_checks._compare_buffer): nothing changes
outside the view, and inside it the buffer holds the values judged, for a view that is one run
of the buffer (compared by slices) as for any other (compared by storage offsets)."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.compare import Mismatch
from conformance.engine.write_checks import _compare_buffer
from conformance.ops import spec_for

SPEC = spec_for("add_.Tensor")


def _views(cbase: torch.Tensor) -> list[torch.Tensor]:
    """A run of the buffer (contiguous, offset 3), the whole buffer, and a strided view."""
    return [
        cbase.as_strided((4, 5), (5, 1), 3),
        cbase.as_strided((cbase.numel(),), (1,), 0),
        cbase.as_strided((4, 5), (1, 4), 2),
    ]


@pytest.mark.parametrize("judged_given", [True, False])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_write_outside_the_view_or_not_where_judged_is_caught(which, judged_given):
    cbase = torch.randn(32)
    cbase[7] = float("nan")
    cview = _views(cbase)[which]
    judged = cview.clone() + 1  # the device's values as read back and judged
    device = cbase.clone()
    _views(device)[which].copy_(judged)
    given = judged if judged_given else None
    _compare_buffer("self", device, cbase, cview, SPEC, given)  # as written: passes

    grid = torch.arange(32).as_strided(cview.shape, cview.stride(), cview.storage_offset())
    offsets = set(grid.reshape(-1).tolist())
    outside = [i for i in range(32) if i not in offsets]
    for i in outside[:1] + outside[-1:]:  # the first and the last element the view leaves out
        spilled = device.clone()
        spilled[i] += 1
        with pytest.raises(Mismatch, match="outside/around the view"):
            _compare_buffer("self", spilled, cbase, cview, SPEC, given)
    if judged_given:  # inside the view: the buffer must hold what was judged, where CPU's is
        moved = device.clone()
        first = min(offsets)
        moved[first] = moved[first] + 5
        with pytest.raises(Mismatch, match="outside/around the view"):
            _compare_buffer("self", moved, cbase, cview, SPEC, judged)
