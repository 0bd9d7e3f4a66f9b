"""Scenario 5: mismatched inputs (device mix, shape, dtype) raise what CPU raises, never crash."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.errorclass import DEVICE, NOT_IMPLEMENTED, classify, same_class
from conformance.scenarios._helpers import assert_same, step

# name -> fn(device, other_device) doing something invalid; on CPU other_device is CPU too
CASES = {
    "add.Tensor shape mismatch": lambda d: torch.add(
        torch.ones(2, 3, device=d), torch.ones(4, device=d)
    ),
    "mul.Tensor shape mismatch": lambda d: torch.ones(3, 2, device=d) * torch.ones(3, 3, device=d),
    "add.out shape mismatch": lambda d: torch.add(
        torch.ones(2, 3, device=d), torch.ones(5, 3, device=d), out=torch.empty(2, 3, device=d)
    ),
    "add.out float into int64": lambda d: torch.add(
        torch.ones(2, device=d),
        torch.ones(2, device=d),
        out=torch.empty(2, dtype=torch.long, device=d),
    ),
    "add_.Tensor float into int64": lambda d: torch.ones(3, dtype=torch.long, device=d).add_(
        torch.full((3,), 0.5, device=d)
    ),
    "add_.Tensor broadcast into smaller self": lambda d: torch.ones(3, device=d).add_(
        torch.ones(2, 3, device=d)
    ),
    "masked_fill_ with a float mask": lambda d: torch.ones(3, device=d).masked_fill_(
        torch.ones(3, device=d), 0.0
    ),
    "masked_fill_ mask shape mismatch": lambda d: torch.ones(2, 3, device=d).masked_fill_(
        torch.ones(4, dtype=torch.bool, device=d), 0.0
    ),
    "masked_fill_ non-0-dim value": lambda d: torch.ones(3, device=d).masked_fill_(
        torch.ones(3, dtype=torch.bool, device=d), torch.ones(2, device=d)
    ),
    "where.self shape mismatch": lambda d: torch.where(
        torch.ones(2, 3, dtype=torch.bool, device=d),
        torch.ones(4, device=d),
        torch.ones(3, device=d),
    ),
    "cat dtype ok, shape mismatch": lambda d: torch.cat(
        [torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]
    ),
    "index_select index out of range": lambda d: torch.index_select(
        torch.ones(3, 2, device=d), 0, torch.tensor([0, 5], device=d)
    ),
    "index_select float index": lambda d: torch.index_select(
        torch.ones(3, 2, device=d), 0, torch.tensor([0.0], device=d)
    ),
    "view incompatible shape": lambda d: torch.ones(2, 3, device=d).t().view(6),
    "sum.dim_IntList dim out of range": lambda d: torch.ones(2, 3, device=d).sum(dim=5),
    "tril on a 1-d tensor": lambda d: torch.tril(torch.ones(3, device=d)),
    "matmul shape mismatch (fallback)": lambda d: (
        torch.ones(2, 3, device=d) @ torch.ones(2, 3, device=d)
    ),
}


def _outcome(fn, device):
    try:
        value = fn(device)
    except Exception as exc:  # noqa: BLE001 - the exception type is what is compared
        return None, exc
    return value, None


# Cases that fail on echo_npu because of a known backend bug: {case: reason} (strict xfail).
# masked_fill_ with a float mask and index_select with a float index were fixed in echo_npu.
BACKEND_BUGS: dict[str, str] = {}


def _params(cases, bugs):
    return [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=bugs[c])) if c in bugs else c
        for c in cases
    ]


@pytest.mark.parametrize("case", _params(CASES, BACKEND_BUGS))
def test_mismatched_inputs_raise_like_cpu(device, case):
    step(case)
    expected, cpu_exc = _outcome(CASES[case], torch.device("cpu"))
    got, dev_exc = _outcome(CASES[case], device)
    if cpu_exc is None:
        assert dev_exc is None, f"{case}: device raised {dev_exc!r}, CPU returned a result"
        assert_same(got, expected, case)
        return
    assert dev_exc is not None, f"{case}: CPU raised {cpu_exc!r}, the device returned a result"
    want, got = classify(cpu_exc), classify(dev_exc)
    assert got.kind != NOT_IMPLEMENTED, f"{case}: unsupported: device raised {got.describe()}"
    assert same_class(want, got), (
        f"{case}: device raised {got.describe()}; CPU raised {want.describe()} (another class)"
    )


DEVICE_MIX = {
    "add.Tensor": lambda a, b: a + b,
    "mul.Tensor": lambda a, b: a * b,
    "add.out": lambda a, b: torch.add(a, a, out=b),
    "add_.Tensor": lambda a, b: a.add_(b),
    "masked_fill_.Tensor mask": lambda a, b: a.masked_fill_(b > 0, 1.0),
    "where.self": lambda a, b: torch.where(a > 0, a, b),
    "cat": lambda a, b: torch.cat([a, b]),
    "index_select index": lambda a, b: torch.index_select(a, 0, b.long()),
    "matmul (fallback)": lambda a, b: a @ b,
}


# {(op, order): reason} of known backend bugs (strict xfail). Fixed in echo_npu: npu @ cpu through
# the boxed cpu_fallback used to return a result (the fallback wrapper now checks devices).
DEVICE_MIX_BUGS: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(
    "op,order",
    [
        pytest.param(
            op,
            order,
            marks=[pytest.mark.xfail(strict=True, reason=DEVICE_MIX_BUGS[(op, order)])]
            if (op, order) in DEVICE_MIX_BUGS
            else [],
        )
        for op in DEVICE_MIX
        for order in ("device_first", "cpu_first")
    ],
)
def test_device_mix_raises(device, op, order):
    """A device tensor with a non-0-dim CPU tensor: an error about devices (as two devices on
    CUDA), not a missing kernel (the dispatcher's "could not run ... available for: [CPU, ...]"
    mentions CPU too)."""
    step(f"{op} with a CPU operand")
    a = torch.ones(3, 3, device=device)
    b = torch.ones(3, 3)
    if order == "cpu_first":
        a, b = b, a
    with pytest.raises(Exception) as info:  # noqa: PT011 - the class is checked below
        DEVICE_MIX[op](a, b)
    got = classify(info.value)
    assert got.kind == DEVICE, f"{op}: device mix raised {got.describe()}, not a device error"


def test_cpu_scalar_tensor_is_allowed(device):
    """A 0-dim CPU tensor mixes with device tensors, like a Python scalar (as on CUDA)."""
    step("add.Tensor with a 0-dim CPU tensor")
    got = torch.ones(2, 2, device=device) + torch.tensor(2.5)
    assert_same(got, torch.full((2, 2), 3.5), "add.Tensor with a 0-dim CPU tensor")


def test_masked_fill_with_cpu_scalar_value(device):
    step("masked_fill_.Tensor with a 0-dim CPU value")
    x = torch.zeros(2, 2, device=device)
    x.masked_fill_(torch.eye(2, dtype=torch.bool, device=device), torch.tensor(4.0))
    assert_same(x, torch.eye(2) * 4, "masked_fill_.Tensor with a 0-dim CPU value")
