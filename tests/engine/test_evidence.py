"""Tolerances from evidence (engine/evidence.py): a -sizes, -arguments or -models sample is
judged by CPU's own error against the same call in float64, so a large reduction is judged as
tightly as CPU is accurate, and a half-precision multiply-add as loosely as CPU itself errs."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import evidence
from conformance.engine.calls import Call
from conformance.engine.compare import ErrorStats, Mismatch, compare_values, tolerance
from conformance.engine.placing import place

SUM = torch.ops.aten.sum.dim_IntList


def _scale(op, call: Call):
    placed = place(call, "contiguous", op._schema)
    cpu = placed.materialize("cpu")
    return evidence.measured_scale(op, op._schema, placed, op(*cpu.args, **cpu.kwargs), [])


def test_a_large_bfloat16_sum_is_judged_by_cpu_s_own_error():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(65537, generator=g) + 0.5).bfloat16()
    scale = _scale(SUM, Call("sum.dim_IntList", (x, [0])))
    rtol, atol = tolerance(torch.bfloat16, scale)
    cpu, truth = SUM(x, [0]), x.double().sum()
    assert atol >= 2 * abs(float(cpu) - float(truth))  # as accurate as CPU, erring the other way
    compare_values("output", cpu, cpu, scale, ErrorStats())
    tiles = torch.tensor(float(x[:4096].float().sum()), dtype=torch.bfloat16)  # stops adding
    with pytest.raises(Mismatch):
        compare_values("output", tiles, cpu, scale, ErrorStats())


def test_a_float32_sum_cpu_gets_right_keeps_the_base_tolerance():
    x = torch.rand(65537, generator=torch.Generator().manual_seed(1)) + 0.5
    rtol, atol = tolerance(torch.float32, _scale(SUM, Call("sum.dim_IntList", (x, [0]))))
    base = tolerance(torch.float32)
    assert rtol == base[0] and atol < 1e-2  # within a few ulps of 98,000: nothing like 1e-4


def test_nothing_floating_to_measure_gives_no_scale():
    ints = torch.arange(10)
    assert _scale(SUM, Call("sum.dim_IntList", (ints, [0]))) is None
