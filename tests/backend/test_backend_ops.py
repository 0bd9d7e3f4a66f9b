"""Smoke test of the native kernels against CPU (values, dtypes, strides, errors)."""

from __future__ import annotations

import pytest
import torch

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]


def make(shape, dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dt == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dt.is_floating_point:
        return torch.randn(shape, generator=g).to(dt)
    return torch.randint(0, 9, shape, generator=g).to(dt)


def to_npu(x):
    return x.to("npu") if isinstance(x, torch.Tensor) else x


def check(fn, *args):
    try:
        expected, err = fn(*args), None
    except Exception as e:  # noqa: BLE001 - the device must raise the same type
        expected, err = None, e
    if err is not None:
        with pytest.raises(type(err)):
            fn(*map(to_npu, args))
        return
    got = fn(*map(to_npu, args))
    assert got.device.type == "npu"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.numel() > 1:
        assert got.stride() == expected.stride()
    tol = 1e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1e-3
    torch.testing.assert_close(got.cpu(), expected, atol=tol, rtol=tol, equal_nan=True)


CASES = {
    "add": lambda a, b: torch.add(a, b, alpha=2),
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "eq": torch.eq,
    "lt": torch.lt,
    "gt_scalar": lambda a, b: a > 1,
    "ne_scalar": lambda a, b: a != 0,
    "neg": lambda a, b: torch.neg(a),
    "abs": lambda a, b: torch.abs(a.t()),
    "exp": lambda a, b: torch.exp(a),
    "sqrt": lambda a, b: torch.sqrt(a.t()),
    "sqrt_out": lambda a, b: torch.sqrt(b, out=torch.empty(0, device=b.device)),
    "cumsum": lambda a, b: a.t().cumsum(-1),
    "cumsum_dtype": lambda a, b: torch.cumsum(a, 0, dtype=torch.float64),
    "cumsum_inplace": lambda a, b: a.double().clone().t().cumsum_(0),
    "relu": lambda a, b: torch.relu(a),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "sum": lambda a, b: a.t().sum(0, keepdim=True),
    "mean": lambda a, b: a.mean((0, 1)),
    "amax": lambda a, b: a.amax(1),
    "all": lambda a, b: a.all(),
    "any": lambda a, b: a.any(),
    "tril": lambda a, b: a.t().tril(1),
    "triu": lambda a, b: a.triu(-1),
    "cat": lambda a, b: torch.cat([a, b.expand(3, 4)], 1),
    "index_select": lambda a, b: a.index_select(1, torch.tensor([3, 0, 0], device=a.device)),
    "softmax": lambda a, b: torch.softmax(a, 0),
    "masked_fill": lambda a, b: a.clone().t().masked_fill_(b.t()[:, :1] > 0, 5).t(),
    "add_out_resize": lambda a, b: torch.add(
        a, b, out=torch.empty(0, dtype=a.dtype, device=a.device)
    ),
    "inplace_strided": lambda a, b: a.clone().t().mul_(b.reshape(4, 1)).t(),
}


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_native_matches_cpu(npu, case, dt):
    check(CASES[case], make((3, 4), dt), make((4,), dt, seed=1))


def test_errors_match_cpu(npu):
    a = torch.ones(3, 4)
    check(lambda x: x.expand(2, 3, 4).add_(1), a)  # internal overlap
    check(lambda x: torch.add(x, x, out=torch.empty(3, 4, dtype=torch.int64, device=x.device)), a)
    check(lambda x: x.index_select(0, torch.tensor([7], device=x.device)), a)
    check(lambda x: torch.ones(2, dtype=torch.bool, device=x.device) - True, a)
    check(lambda x: x.amax(0) if x.numel() else x, torch.ones(0, 2))
    check(lambda x: x.int().div(2), a)  # true division to float


def test_no_fallback_for_native_smoke(npu):
    npu.reset_fallback_counts()
    a, b = make((3, 4), torch.float32).to("npu"), make((4,), torch.float32).to("npu")
    torch.softmax((a * b + a).relu().exp(), 1).sum(0).cpu()
    assert npu.fallback_counts() == {}, npu.fallback_counts()


def test_view_as_real_and_complex_are_views(npu):
    """torch.distributed views complex tensors as real before every collective: a copy (what
    cpu_fallback gives a view op) would lose the results."""
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).to("npu")
    r = torch.view_as_real(z)
    assert r.device == z.device and r.data_ptr() == z.data_ptr() and r.shape == (2, 2)
    r.mul_(2)
    assert z.cpu().tolist() == [2 + 4j, 6 - 8j]
    back = torch.view_as_complex(r)
    assert back.data_ptr() == z.data_ptr() and torch.equal(back.cpu(), z.cpu())
    assert npu.fallback_counts().get("view_as_real", 0) == 0
