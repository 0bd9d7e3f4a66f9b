"""What a device declares of its dtypes against what it does (engine/declared_dtypes.py)."""

from __future__ import annotations

import torch

from conformance.engine import declared_dtypes


def test_cpu_handles_every_dtype_it_is_judged_on():
    handled = declared_dtypes.tried("cpu")
    assert torch.float32 in handled and torch.bfloat16 in handled
    assert all(why == "" for why in handled.values()), handled
    assert torch.qint8 not in handled  # CPU cannot make one this way: not judged


def test_differences_name_both_directions():
    handled = {torch.float32: "", torch.bfloat16: "", torch.float16: "RuntimeError: no kernel"}
    assert declared_dtypes.differences({torch.float32, torch.bfloat16}, handled) == []
    wrong = declared_dtypes.differences({torch.float32, torch.float16}, handled)
    assert wrong == [
        "declared but not handled: float16 (RuntimeError: no kernel)",
        "handled but not declared: bfloat16",
    ]
    assert declared_dtypes.differences({torch.float32, torch.int4}, {torch.float32: ""}) == []
