"""What IEEE 754 asks of an op (engine/ieee.py): arithmetic correctly rounded, the defined ops
and data movement exact, every other pointwise function only recommended; an add with an alpha
is a multiply-add, not one operation."""

from __future__ import annotations

import torch

from conformance.engine import ieee


def test_kinds():
    for overload in ("add.Tensor", "sub_.Tensor", "mul.out", "div.Tensor", "sqrt", "reciprocal_"):
        assert ieee.kind(overload) == ieee.CORRECTLY_ROUNDED, overload
    for overload in (
        "neg",
        "where.self",
        "relu",
        "index_select",
        "cumsum",
        "amax",
        "div.Tensor_mode",
    ):
        assert ieee.kind(overload) == ieee.EXACT, overload
    for overload in ("exp", "hypot", "sigmoid", "gelu", "pow.Tensor_Scalar", "rsqrt"):
        assert ieee.kind(overload) == ieee.RECOMMENDED, overload


def test_an_alpha_makes_a_multiply_add():
    schema = torch.ops.aten.add.Tensor._schema
    x = torch.ones(2)
    assert ieee.single_operation(schema, (x, x), {})
    assert ieee.single_operation(schema, (x, x), {"alpha": -1})
    assert not ieee.single_operation(schema, (x, x), {"alpha": -0.1})
    assert ieee.single_operation(torch.ops.aten.mul.Tensor._schema, (x, x), {})
