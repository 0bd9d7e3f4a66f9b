"""Placing a call: written args keep read-only layouts off, shape layouts shrink together."""

import torch

from conformance.engine.calls import Call
from conformance.engine.placing import place

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
