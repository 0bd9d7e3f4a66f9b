"""Foundations and the primitive read-back, against echo_npu with a copy fault switched on."""

from __future__ import annotations

import pytest
import torch

echo_npu = pytest.importorskip("echo_npu")

from conformance.engine.foundations import Foundations  # noqa: E402
from conformance.engine.transfer import read_back, to_device  # noqa: E402

DEVICE = torch.device("npu", 0)


@pytest.fixture
def offset_fault():
    before = echo_npu.get_faults()
    echo_npu.set_faults(["copy_ignores_offset"])
    yield
    echo_npu.set_faults(before)


def _offset_view():
    base = torch.arange(12.0)
    return base, to_device(base, DEVICE).as_strided((2, 3), (3, 1), 4)


def test_read_back_does_not_depend_on_offset_copies(offset_fault):
    base, view = _offset_view()
    want = base.as_strided((2, 3), (3, 1), 4)
    assert torch.equal(read_back(view), want)
    assert not torch.equal(view.cpu(), want)  # the backend's own strided copy is broken


def test_no_foundation_is_broken_without_faults():
    assert Foundations(DEVICE).broken(torch.float32) == []


def test_an_offset_copy_bug_is_found_and_blamed(offset_fault):
    f = Foundations(DEVICE)
    broken = f.broken(torch.float32)
    assert broken and {p.op for p in broken} == {"_copy_from"}
    assert {p.layout for p in broken} >= {"offset", "noncontiguous"}
    assert all("contiguous" != p.layout for p in broken)  # the harness's own path still works

    def never():
        raise AssertionError("a foundation case is never blocked by itself")

    assert f.blame("_copy_from", torch.float32, "offset", never) is None
    probe = f.blame("_copy_from_and_resize", torch.float32, "offset", never)
    assert probe is not None and probe.case == "_copy_from-float32-offset-native"
    fallback = f.blame("abs", torch.float32, "offset", lambda: {"abs", "_copy_from"}, True)
    assert fallback is not None and fallback.op == "_copy_from"
    assert f.blame("abs", torch.float32, "offset", lambda: {"abs"}) is None
