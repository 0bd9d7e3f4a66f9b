"""Placing a call: written args keep read-only layouts off, shape layouts shrink together."""

import torch

from conformance.engine.calls import Call
from conformance.engine.placing import place
from conformance.engine.poison import out_like, poison_of
from conformance.samples.twins import derive

MASKED_FILL = torch.ops.aten.masked_fill_.Scalar._schema
ADD_OUT = torch.ops.aten.add.out._schema


def _call():
    return Call("masked_fill_.Scalar", (torch.ones(4, 5), torch.zeros(4, 5, dtype=torch.bool), 2.0))


def test_written_self_is_never_expanded():
    placed = place(_call(), "expanded", MASKED_FILL)
    self_leaf, mask_leaf = placed.tensor_leaves()
    assert self_leaf.written and 0 not in self_leaf.placement.stride
    assert not mask_leaf.written and mask_leaf.placement.stride[0] == 0


def test_transposed_applies_to_every_tensor():
    placed = place(_call(), "transposed", MASKED_FILL)
    assert all(leaf.placement.stride == (1, 4) for leaf in placed.tensor_leaves())


def test_zero_size_shrinks_only_the_largest_inputs():
    call = Call("add.out", (torch.ones(3, 4), torch.ones(4)), {"out": torch.empty(3, 4)})
    placed = place(call, "zero_size", ADD_OUT)
    shapes = [leaf.placement.size for leaf in placed.tensor_leaves()]
    assert shapes == [(0, 4), (4,), (0, 4)]


def test_layout_that_changes_nothing_gives_none():
    call = Call("masked_fill_.Scalar", (torch.ones(5), torch.zeros(5, dtype=torch.bool), 1.0))
    assert place(call, "transposed", MASKED_FILL) is None


def test_resize_out_replaces_out_with_an_empty_tensor():
    call = Call("add.out", (torch.ones(3, 4), torch.ones(4)), {"out": torch.empty(3, 4)})
    placed = place(call, "contiguous", ADD_OUT, resize_out=True)
    assert placed.tensor_leaves()[-1].placement.size == (0,)


def test_materialize_replaces_cpu_device_arguments():
    call = Call(
        "empty.memory_format", ([2],), {"dtype": torch.float32, "device": torch.device("cpu")}
    )
    placed = place(call, "contiguous", torch.ops.aten.empty.memory_format._schema)
    m = placed.materialize("meta")
    assert m.kwargs["device"] == torch.device("meta")


def test_a_cpu_run_gets_fresh_copies_and_never_writes_a_placement():
    """On CPU a read-only input that is its whole buffer is one copy in its shape (the buffer
    is the view, as on a device); a written one keeps a flat buffer around its view. Writing
    either leaves the placement, which every later run copies, as it was."""
    placed = place(_call(), "contiguous", MASKED_FILL)
    m = placed.materialize("cpu")
    (self_leaf, self_base, self_view), (mask_leaf, mask_base, mask_view) = m.bases
    assert self_leaf.written and self_base.dim() == 1 and self_view.shape == (4, 5)
    assert not mask_leaf.written and mask_base is mask_view and mask_view.shape == (4, 5)
    self_view.fill_(3.0)
    mask_view.fill_(True)
    assert bool((self_leaf.placement.base == 1.0).all())
    assert not bool(mask_leaf.placement.base.any())


def test_an_out_argument_is_placed_holding_poison_not_the_answer():
    """An out= tensor captured as `empty_like(answer)` may hold the answer (the block the
    functional call just freed): a kernel that left elements unwritten then passed. Placed,
    every out= element holds poison, on every layout; the inputs keep their values."""
    x = torch.randn(3, 4)
    call = Call("abs.out", (x,), {"out": x.abs()})
    for layout in ("contiguous", "noncontiguous", "offset", "transposed"):
        placed = place(call, layout, torch.ops.aten.abs.out._schema)
        self_leaf, out_leaf = placed.tensor_leaves()
        assert torch.equal(self_leaf.placement.values(), x)
        held = out_leaf.placement.values()
        assert not (held == x.abs()).any(), layout
        assert torch.equal(held, poison_of(x)), layout


def test_a_boolean_out_argument_holds_the_negated_answer():
    """No byte pattern poisons a bool, so the sources that know the answer hold its negation
    (samples/twins.py re-makes out= from the functional result) and placing keeps it."""
    x, y = torch.arange(6.0).reshape(2, 3), torch.tensor([1.0, 4.0])
    call = derive(Call("isin.Tensor_Tensor", (x, y), {}), "isin.Tensor_Tensor_out", torch.isin)
    assert call is not None
    placed = place(call, "contiguous", torch.ops.aten.isin.Tensor_Tensor_out._schema)
    held = placed.tensor_leaves()[-1].placement.values()
    assert held.dtype == torch.bool and torch.equal(held, ~torch.isin(x, y))
    assert torch.equal(out_like(torch.isin(x, y)), ~torch.isin(x, y))
