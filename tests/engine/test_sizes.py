"""The -sizes value set (samples/sizes.py): each family of ops grows along the extent its kernels
tile (pointwise: all of it; reductions and scans: the reduced dim; matrix products: the
contraction; losses and batch norm: the batch; gathers: the indices), to the boundary sizes, with
values that expose low-precision accumulation and, where ties have no order, distinct values."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.calls import Call
from conformance.samples import sizes


def _grown(overload: str, call: Call, dtype=torch.float32, choice="boundaries") -> list[Call]:
    return sizes.sized_calls(overload, dtype, [call], choice)


def test_pointwise_ops_grow_to_the_vector_tails():
    made = _grown("exp", Call("exp", (torch.rand(5, 4),)))
    assert [c.args[0].numel() for c in made] == list(sizes.POINTWISE_SIZES["boundaries"])
    assert all(c.args[0].dim() == 1 for c in made)
    large = _grown("exp", Call("exp", (torch.rand(5, 4),)), choice="large")
    assert {4095, 4096, 4097} <= {c.args[0].numel() for c in large}


def test_a_reduction_grows_its_reduced_dim_to_65537_with_positive_mixed_values():
    call = Call("sum.dim_IntList", (torch.randn(3, 4, 5).bfloat16(), [1]))
    made = _grown("sum.dim_IntList", call, torch.bfloat16)
    shapes = [tuple(c.args[0].shape) for c in made]
    assert shapes[-1] == (1, 65537, 1) and (1, 1025, 1) in shapes, shapes
    values = made[-1].args[0]
    assert bool((values > 0).all()) and values.max() / values.min() > 8  # mixed magnitudes
    cpu = torch.ops.aten.sum.dim_IntList(*made[-1].args)
    assert float(cpu) > 4096 * 2  # what a bfloat16 accumulator of tiles stops short of


def test_matrix_products_grow_the_contraction_and_gathers_the_indices():
    made = _grown("mm", Call("mm", (torch.randn(2, 3), torch.randn(3, 4))))
    assert [(c.args[0].shape[1], c.args[1].shape[0]) for c in made][-1] == (65537, 65537)
    made = _grown(
        "index_select", Call("index_select", (torch.randn(5, 3), 0, torch.tensor([4, 0])))
    )
    assert made[-1].args[2].numel() == 65537 and int(made[-1].args[2].max()) <= 4


def test_a_loss_grows_its_batch_and_layer_norm_its_normalised_extent():
    x, target = torch.randn(2, 3), torch.tensor([0, 2])
    made = _grown("nll_loss_forward", Call("nll_loss_forward", (x, target, None, 1, -100)))
    assert made[-1].args[0].shape == (65537, 3) and made[-1].args[1].shape == (65537,)
    ln = Call("native_layer_norm", (torch.randn(2, 3, 4), [4], torch.randn(4), None, 1e-5))
    made = _grown("native_layer_norm", ln)
    assert made[-1].args[1] == [65537] and made[-1].args[2].shape == (65537,)


def test_ops_whose_ties_have_no_order_get_distinct_values_or_no_sample():
    call = Call("sort", (torch.randn(3, 5).bfloat16(), -1))
    for c in _grown("sort", call, torch.bfloat16):
        v = c.args[0].reshape(-1)
        assert v.unique().numel() == v.numel()
    assert max(c.args[0].shape[-1] for c in _grown("sort", call, torch.bfloat16)) < 65537
    call = Call("sort", (torch.randn(3, 5), -1))
    assert max(c.args[0].shape[-1] for c in _grown("sort", call, torch.float32)) == 65537


def test_what_cannot_grow_has_no_sizes():
    assert not sizes.applies("cat", torch.float32)  # data movement of a list: no extent
    assert not sizes.applies("normal_", torch.float32)  # random draws are not compared elementwise
    assert sizes.sized_calls("exp", torch.float32, [Call("exp", (torch.rand(3),))], "none") == []


def _run_calls(overload: str, dtype=torch.float32) -> list[Call]:
    """The -sizes calls the run makes: every matching OpInfo's samples, grown."""
    from conformance.samples import opinfo

    return sizes.sized_calls(
        overload, dtype, opinfo.captured_calls(overload, dtype, (), None), "boundaries"
    )


def test_gather_grows_its_index_with_its_input_so_every_output_holds_elements():
    """Issue 56: gather's six -sizes samples grew the input to 65,537 but kept a (2, 0) index:
    every output was empty, and a gather wrong past 1,024 elements passed "6 samples"."""
    made = _run_calls("gather")
    assert made and max(c.args[2].numel() for c in made) == 65537
    for c in made:
        out = torch.gather(*c.args, **c.kwargs)
        assert out.numel() == c.args[2].numel() > 0
        assert int(c.args[2].max()) < c.args[0].shape[c.args[1]]


@pytest.mark.parametrize("overload", ["all.dim", "any.dim"])
def test_all_and_any_along_a_dim_get_sized_calls(overload):
    """Issue 56: all.dim/any.dim got 0 sized calls (CPU was asked through all.dims, which
    refused an int dim) and skipped as "no samples"."""
    made = _run_calls(overload)
    assert [c.args[0].numel() for c in made] == list(sizes.EXTENT_SIZES["boundaries"])


def test_a_grown_call_whose_output_is_empty_is_no_sample():
    call = Call("index_select", (torch.randn(5, 3), 1, torch.tensor([], dtype=torch.long)))
    assert not sizes._accepted(call)
    assert sizes._accepted(Call("index_select", (torch.randn(5, 3), 1, torch.tensor([0]))))


@pytest.mark.parametrize("overload", ["mm", "bmm", "mv"])
def test_matrix_products_reach_65537_within_the_budget(overload):
    """Issue 56: mm/bmm/mv stopped at 1,025 (their other dims kept the element budget), though
    the docs say 65,537: their free dims are cut to one row and one column."""
    made = _run_calls(overload)
    assert made and max(c.args[1].shape[-1 if overload == "mv" else -2] for c in made) == 65537


@pytest.mark.parametrize("overload", ["mse_loss", "binary_cross_entropy", "huber_loss"])
def test_losses_grow_their_batch(overload):
    """Issue 56: sizes.py says "losses: the batch", but only nll and cross entropy grew."""
    made = _run_calls(overload)
    assert [c.args[0].shape[0] for c in made][-1] == 65537
    assert all(c.args[1].shape == c.args[0].shape for c in made)


def test_the_families_no_plan_grows_are_named_with_the_reason():
    assert {"native_group_norm", "convolution"} <= set(sizes.NOT_SIZED)
    assert all(why for why in sizes.NOT_SIZED.values())
