"""Comparison: per-dtype tolerances, exact integers, NaN equality, clear messages."""

import pytest
import torch

from conformance.engine.compare import ErrorStats, Mismatch, compare_tensor, significant_strides


def _cmp(actual, expected, **kw):
    opts = dict(
        device_type="cpu", check_strides=True, check_values=True, tol_scale=1.0, stats=ErrorStats()
    )
    opts.update(kw)
    compare_tensor("output", actual, expected, **opts)


def test_float32_within_tolerance_passes_and_beyond_fails():
    e = torch.ones(10)
    _cmp(e + 1e-7, e)
    with pytest.raises(Mismatch, match=r"1/10 elements differ.*first at \[3\]") as info:
        a = e.clone()
        a[3] = 1.01
        _cmp(a, e)
    assert info.value.check == "values"


def test_integers_compare_exactly():
    with pytest.raises(Mismatch):
        _cmp(torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]))


def test_nan_equals_nan():
    _cmp(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]))


def test_dtype_shape_and_strides_are_checked_first():
    with pytest.raises(Mismatch, match="dtype torch.float64, cpu gives torch.float32"):
        _cmp(torch.ones(2, dtype=torch.float64), torch.ones(2))
    with pytest.raises(Mismatch, match="shape"):
        _cmp(torch.ones(3), torch.ones(2))
    with pytest.raises(Mismatch, match="strides") as info:
        _cmp(torch.ones(3, 4), torch.ones(4, 3).t())
    assert info.value.check == "strides"


def test_strides_of_size_one_dims_do_not_matter():
    assert significant_strides(torch.ones(1, 4)) == significant_strides(torch.ones(4, 1).t())


def test_errors_are_recorded_in_stats():
    stats = ErrorStats()
    _cmp(torch.tensor([1.0, 2.0]) + 1e-6, torch.tensor([1.0, 2.0]), stats=stats)
    assert 0 < stats.max_abs < 1e-5


def test_complex_half_values_are_compared_not_a_harness_error():
    from conformance.engine.compare import ErrorStats, Mismatch, compare_values

    real = torch.arange(6, dtype=torch.float16)
    a = torch.complex(real, -real)
    compare_values("out", a, a.clone(), 1.0, ErrorStats())
    with pytest.raises(Mismatch, match="out"):
        compare_values("out", a, torch.complex(real, real), 1.0, ErrorStats())
