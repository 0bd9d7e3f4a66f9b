"""Layouts keep values, produce the promised strides/offsets, and fill gaps visibly."""

import pytest
import torch

from conformance.engine import layouts
from conformance.engine.calls import Call
from conformance.errors import ConformanceUsageError


def _view(t, name):
    placement = layouts.LAYOUTS[name](t)
    assert placement is not None, name
    _, view = placement.materialize("cpu")
    return view


@pytest.mark.parametrize("name", sorted(layouts.KEEPS_VALUES))
def test_value_preserving_layouts_keep_values(name):
    t = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    view = _view(t, name)
    assert torch.equal(view, t)
    assert view.shape == t.shape


SHAPES = [(), (1,), (7,), (3, 1), (4, 5), (1, 3, 2), (2, 3, 4, 5), (2, 3, 2, 2, 3), (0, 3)]


@pytest.mark.parametrize("name", sorted(layouts.LAYOUTS))
def test_keeps_values_names_exactly_the_layouts_whose_values_equal_the_tensor(name):
    """consistency.layout_free runs CPU on contiguous copies once for all of KEEPS_VALUES: a
    layout in it whose placement changed a value or a shape would judge its cases against
    another sample's reference; one left out only costs a rerun."""
    kept = True
    for shape in SHAPES:
        for dtype in (torch.float32, torch.int64, torch.bool, torch.complex64):
            t = torch.randn(shape).to(dtype) if dtype != torch.bool else torch.rand(shape) > 0.5
            placement = layouts.LAYOUTS[name](t)
            if placement is None:
                continue
            values = placement.values()
            kept &= values.shape == t.shape and torch.equal(values, t)
    assert kept == (name in layouts.KEEPS_VALUES)


def test_each_layout_has_its_memory_shape():
    t = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    assert _view(t, "contiguous").is_contiguous()
    assert _view(t, "transposed").stride()[-2:] == (1, 4)
    assert _view(t, "sliced").stride()[0] == 2 * 60
    assert _view(t, "offset").storage_offset() == 3
    assert _view(t, "noncontiguous").stride()[-1] == 2
    assert _view(t, "channels_last").is_contiguous(memory_format=torch.channels_last)
    expanded = _view(t, "expanded")
    assert expanded.stride()[0] == 0 and torch.equal(expanded[1], t[0])
    assert _view(t, "zero_size").shape == (0, 3, 4, 5)
    assert _view(t, "zero_dim").dim() == 0


def test_gaps_are_filled_with_a_visible_value():
    t = torch.zeros(4, 3)
    base, _ = layouts.sliced(t).materialize("cpu")
    assert (base.reshape(8, 3)[1::2] == layouts.GAP_VALUE).all()


def test_inapplicable_layouts_return_none():
    assert layouts.transposed(torch.ones(5)) is None
    assert layouts.channels_last(torch.ones(2, 3)) is None
    assert layouts.expanded(torch.ones(1, 1)) is None
    assert layouts.zero_dim(torch.tensor(1.0)) is None


def test_unknown_layout_is_a_one_line_error():
    with pytest.raises(ConformanceUsageError, match="unknown layout.*valid: contiguous"):
        layouts.parse_layouts("contiguous,diagonal")


@pytest.mark.parametrize("name", sorted(set(layouts.LAYOUTS) - {"zero_size"}))
def test_every_layout_is_a_view_made_by_view_ops(name):
    """Issue 45: on a device without storage a placement is made by view ops on the buffer
    (never as_strided): the same values, and a write into the view lands in the buffer."""
    placement = layouts.LAYOUTS[name](torch.arange(120.0).reshape(2, 3, 4, 5))
    base = placement.base.clone()
    view = placement.view_of(base)
    assert view is not None
    assert view.shape == placement.values().shape and torch.equal(view, placement.values())
    # a chain of view ops, never a copy: the view shares the buffer's memory
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def test_a_transposed_placement_is_transposed_by_permute():
    placement = layouts.LAYOUTS["transposed"](torch.arange(6.0).reshape(2, 3))
    view = placement.view_of(placement.base.clone())
    assert view.stride() == placement.stride and not view.is_contiguous()


@pytest.mark.parametrize("name", sorted(layouts.LAYOUTS))
def test_a_placement_owns_its_buffer(name):
    """Placing copies only where the layout did not make a buffer of its own: a placement that
    shared the sample's memory (channels_last of a tensor already channels_last, contiguous of
    a contiguous one) would change when a run writes the sample, and the next case would read
    other values."""
    for t in (
        torch.randn(2, 3, 4, 5),
        torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
        torch.randn(2, 3, 4, 5, 2).contiguous(memory_format=torch.channels_last_3d),
        torch.randn(5, 4).t(),
    ):
        placement = layouts.LAYOUTS[name](t)
        if placement is None:
            continue
        before = placement.base.clone()
        t.fill_(-1.0)
        assert torch.equal(placement.base, before), (name, t.stride())


@pytest.mark.parametrize("name", sorted(layouts.LAYOUTS))
def test_the_layout_free_reference_is_skipped_only_where_it_would_place_the_same(name):
    """sample_run runs CPU again on contiguous copies (consistency.layout_free) unless every
    argument is already placed contiguous over its whole buffer (`PlacedCall.contiguous`:
    the copies would be the placement again); a layout that moves memory must keep it."""
    from conformance.engine.placing import place

    t = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    call = Call("add.Tensor", (t, t.clone()), {})
    placed = place(call, name, torch.ops.aten.add.Tensor._schema)
    assert placed is not None
    moves_memory = name not in ("contiguous", "zero_size", "zero_dim")
    assert placed.contiguous() is not moves_memory
    # the placement as the device gets it: every buffer contiguous, offset 0, whole
    views = [view for _, _, view in placed.materialize("cpu").bases]
    whole = [v.numel() * v.element_size() == v.untyped_storage().nbytes() for v in views]
    plain = [v.is_contiguous() and not v.storage_offset() for v in views]
    assert moves_memory == (not all(whole) or not all(plain))


def test_the_contiguous_layouts_cpu_run_is_the_others_layout_free_reference_as_a_copy():
    """sample_run keeps the contiguous case's CPU run as the layout-free reference of the
    layouts that keep the values (consistency.keep_contiguous_run): it must equal CPU's own run
    on contiguous copies, stay so when the case's checks change its reference in place
    (unvectorised.py writes the one-element values over a vectorised kernel's NaNs), and never
    stand for a call that writes an argument."""
    from conformance.engine import consistency
    from conformance.engine.checks import invoke
    from conformance.engine.placing import place
    from conformance.ops import spec_for

    op = torch.ops.aten.add.Tensor
    spec = spec_for("add.Tensor")
    t = torch.randn(4, 5)
    call = Call("add.Tensor", (t, t.clone() + 1), {})
    contiguous = place(call, "contiguous", op._schema)
    cpu = contiguous.materialize("cpu")
    expected = invoke(op, cpu)
    consistency.keep_contiguous_run(op, spec, contiguous, op, cpu, expected)
    expected.result.fill_(float("nan"))  # as a check may rewrite its own reference
    moved = place(call, "noncontiguous", op._schema)
    strided = invoke(op, moved.materialize("cpu"))
    free = consistency.layout_free(op, spec, moved, op, strided)
    assert free is not None and torch.equal(free.outcome.result, t + (t + 1))
    assert consistency.disagreement(spec, moved.materialize("cpu"), strided, free) is None

    inplace = torch.ops.aten.add_.Tensor
    written = Call("add_.Tensor", (t.clone(), t.clone()), {})
    placed = place(written, "contiguous", inplace._schema)
    cpu = placed.materialize("cpu")
    consistency.keep_contiguous_run(
        inplace, spec_for("add_.Tensor"), placed, inplace, cpu, invoke(inplace, cpu)
    )
    assert written.layout_free == {}
