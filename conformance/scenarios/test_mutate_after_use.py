"""Scenario 4: mutate an input after use; earlier results must keep their values.

`t2 = t0 + t1; t1.add_(1); torch.save(t1)`: t2 must not change (the buffer donation / aliasing bug
class), for each native binary op, its out= form, and its in-place form.
"""

from __future__ import annotations

import pytest
import torch

from conformance.scenarios._helpers import assert_same, step

OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


def _inputs(device):
    torch.manual_seed(0)
    t0 = torch.randn(4, 5)
    t1 = torch.rand(4, 5) + 0.5  # no division by ~0
    return t0.to(device), t1.to(device)


@pytest.mark.parametrize("form", ["functional", "out", "inplace"])
@pytest.mark.parametrize("op", list(OPS))
def test_mutate_after_use(device, tmp_path, op, form):
    fn = OPS[op]
    name = {"functional": f"{op}.Tensor", "out": f"{op}.out", "inplace": f"{op}_.Tensor"}[form]
    c0, c1 = _inputs(torch.device("cpu"))
    d0, d1 = _inputs(device)
    expected = fn(c0, c1)
    step(name)
    if form == "functional":
        t2 = fn(d0, d1)
    elif form == "out":
        t2 = torch.empty(4, 5, device=device)
        returned = fn(d0, d1, out=t2)
        assert returned is t2, f"{name}: did not return its out= tensor"
    else:
        t2 = d0.clone()
        returned = getattr(t2, f"{op}_")(d1)
        assert returned is t2, f"{name}: did not return self"
    assert_same(t2, expected, f"{name} result")
    step(f"add_.Tensor on an input of {name}")
    d1.add_(torch.ones_like(d1))
    assert_same(d1, c1 + 1, f"add_.Tensor on the input after {name} (t1.add_(1))")
    step(f"mul_.Tensor on the other input of {name}")
    d0.mul_(torch.full_like(d0, 2.0))
    assert_same(d0, c0 * 2, f"mul_.Tensor on the input after {name} (t0.mul_(2))")
    step(f"torch.save of the mutated input of {name}")
    torch.save(d1, tmp_path / "t1.pt")
    loaded = torch.load(tmp_path / "t1.pt", weights_only=True)
    assert_same(loaded, c1 + 1, f"torch.save/load of t1 after add_ (used by {name})")
    assert_same(t2, expected, f"{name} result after its inputs were mutated and saved")
