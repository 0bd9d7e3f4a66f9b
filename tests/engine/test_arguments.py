"""The -arguments value set (samples/arguments.py): every argument's value classes are named
from the schema, the ordinary samples' are measured, and each missing one is made from a sample
with one argument changed, where CPU accepts it, or left out with CPU's reason."""

from __future__ import annotations

import torch

from conformance.engine.calls import Call
from conformance.samples import arguments

X = torch.randn(2, 3)
TARGET = torch.tensor([0, 2])
WEIGHT = torch.rand(3) + 0.5


def _labels(overload: str) -> set[str]:
    return {c.label for c in arguments.classes(overload)}


def test_classes_come_from_the_schema():
    assert _labels("nll_loss_forward") == {
        "weight=present", "weight=absent", "reduction=none", "reduction=mean",
        "reduction=sum", "ignore_index=hit", "ignore_index=missed",
    }  # fmt: skip
    found = _labels("sum.dim_IntList")
    assert {"dim=negative", "dim=non-negative", "dim=several", "dim=None"} <= found
    assert {"keepdim=True", "keepdim=False", "dtype=None", "dtype=set"} <= found
    assert _labels("gelu") == {"approximate=none", "approximate=tanh"}
    assert "layout=None" not in _labels("_to_copy")  # options a case cannot vary are left alone
    assert not _labels("add.Tensor")  # alpha is a plain number: no classes


def test_the_ordinary_samples_reach_what_their_arguments_are():
    none = Call("nll_loss_forward", (X, TARGET, None, 0, -100))
    weighted = Call("nll_loss_forward", (X, TARGET, WEIGHT, 0, 2))
    account = arguments.account("nll_loss_forward", [none, weighted])
    reached = {label for label, how in account.items() if how == "ordinary"}
    assert reached == {
        "weight=present", "weight=absent", "reduction=none", "ignore_index=missed",
        "ignore_index=hit",
    }  # fmt: skip


def test_a_missing_class_is_made_from_the_richest_sample_cpu_accepts():
    """reduction = mean is made from the sample that has a weight: a weighted mean divided by
    the batch size instead of the total weight shows only there (issue 43)."""
    calls = [
        Call("nll_loss_forward", (X, TARGET, None, 0, -100)),
        Call("nll_loss_forward", (X, TARGET, WEIGHT, 0, -100)),
    ]
    made = arguments.derive("nll_loss_forward", torch.float32, calls)
    mean = made["reduction=mean"]
    assert isinstance(mean, Call) and mean.args[2] is not None and mean.args[3] == 1
    assert "reduction=mean" in arguments.reached(mean, "nll_loss_forward")
    assert len(arguments.derived_calls("nll_loss_forward", torch.float32, calls)) == len(made)


def test_a_class_cpu_rejects_is_left_out_with_its_error():
    calls = [Call("_softmax", (X, 1, False))]
    made = arguments.derive("_softmax", torch.float32, calls)
    assert made["half_to_float=True"].startswith("cpu rejects it: RuntimeError: softmax with half")
    assert made["dim=negative"].args[1] == -1


def test_out_arguments_are_remade_for_the_new_result():
    """keepdim changes the result's shape: the out= argument follows it."""
    calls = [Call("sum.IntList_out", (torch.ones(3, 4), [1], False), {"out": torch.zeros(3)})]
    made = arguments.derive("sum.IntList_out", torch.float32, calls)
    kept = made["keepdim=True"]
    assert isinstance(kept, Call) and kept.kwargs["out"].shape == (3, 1)
