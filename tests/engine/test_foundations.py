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

    assert f.blame("_copy_from", torch.float32, "offset", never).blocked_by is None
    probe = f.blame("_copy_from_and_resize", torch.float32, "offset", never).blocked_by
    assert probe is not None and probe.case == "_copy_from-float32-offset-native"
    called = {"abs", "_copy_from"}
    fallback = f.blame("abs", torch.float32, "offset", lambda: called, True).blocked_by
    assert fallback is not None and fallback.op == "_copy_from" and fallback.layout == "offset"
    assert fallback.direction in ("d2h", "h2d")
    assert f.blame("abs", torch.float32, "offset", lambda: {"abs"}).blocked_by is None


def test_blame_needs_evidence_of_the_broken_use(offset_fault):
    """The offset copy is broken; a contiguous case that called _copy_from did not use the
    offset copy: it fails on its own, and names the broken copy as related (issue 20)."""
    f = Foundations(DEVICE)
    called = {"addmm", "_copy_from"}
    contiguous = f.blame("addmm.out", torch.float32, "contiguous", lambda: called, True)
    assert contiguous.blocked_by is None
    assert contiguous.related is not None and contiguous.related.op == "_copy_from"
    # a native kernel copies device->device: the host copies of the offset view are no evidence
    native = f.blame("abs", torch.float32, "offset", lambda: called, False)
    d2d_broken = any(p.direction == "d2d" and p.layout == "offset" for p in f.broken(torch.float32))
    assert (native.blocked_by is not None) == d2d_broken
    # _copy_from_and_resize's contract is about its own layout
    other = f.blame("_copy_from_and_resize", torch.float32, "contiguous", lambda: set())
    assert other.blocked_by is None and other.related is not None


def test_read_back_never_falls_back_to_the_backends_own_copy(monkeypatch):
    """A failed whole-storage copy raises; it used to return the backend's `.cpu()` of the
    (strided) result silently (issue 20)."""
    from conformance.engine import transfer

    _, view = _offset_view()

    def broken(t):
        raise RuntimeError("ENPU d2h failed")

    monkeypatch.setattr(transfer, "read_storage", broken)
    with pytest.raises(transfer.ReadBackError, match="ENPU d2h failed"):
        transfer.read_back(view)


NO_AS_STRIDED = (
    "raised NotImplementedError: Could not run 'aten::as_strided' with arguments from the "
    "'pyreg' backend. This could be because the operator doesn't exist for this backend"
)


def _probe(op: str, layout: str, message: str, rank: int = 3, harness: bool = False, **kw):
    from conformance.engine.foundations import Probe

    return Probe(rank, op, "float32", layout, f"a {layout} view", message, harness, **kw)


def _never():
    raise AssertionError("a missing kernel's evidence is the case's own error, no profile")


def test_a_missing_foundation_blocks_the_cases_whose_own_error_names_it():
    """A backend without `as_strided` (issue 31): the probes that failed only because it is
    missing are its failure, not their foundations'; a case is blocked by it when its own error
    names it, and by nothing when its own failure is something else."""
    probes = [
        _probe("empty_strided", "contiguous", NO_AS_STRIDED, rank=1),
        _probe("as_strided", "contiguous", NO_AS_STRIDED),
        _probe("as_strided", "transposed", NO_AS_STRIDED, harness=True),
        _probe("_copy_from", "transposed", NO_AS_STRIDED, rank=4, direction="d2h"),
    ]
    f = Foundations(DEVICE, prober=lambda dtype: probes)
    assert [(p.op, p.layout) for p in f.broken(torch.float32)] == [
        ("as_strided", "contiguous"),
        ("as_strided", "transposed"),
    ]
    own = "[harness] the suite failed while checking this sample: " + NO_AS_STRIDED[7:]
    blocked = f.blame("cos", torch.float32, "transposed", _never, own=own).blocked_by
    assert blocked is not None and (blocked.op, blocked.layout) == ("as_strided", "transposed")
    assert blocked.no_kernel and blocked.headline().startswith(
        "needs as_strided, which has no kernel"
    )
    empty = f.blame("empty_strided", torch.float32, "contiguous", _never, own=own).blocked_by
    assert empty is not None and empty.op == "as_strided"  # whatever their ranks
    # a case whose own failure is something else did not need the missing kernel
    values = "[values] output: 3/30 elements differ"
    for layout in ("contiguous", "transposed"):
        found = f.blame("add.Tensor", torch.float32, layout, lambda: {"as_strided"}, own=values)
        assert found.blocked_by is None and found.related is None
    # its own kernel missing: unsupported, nothing else to blame
    assert f.blame("as_strided", torch.float32, "transposed", _never, own=own).blocked_by is None
    # a missing kernel that no probe covers: the case's own failure
    sin = own.replace("as_strided", "sin.out")
    assert f.blame("cos", torch.float32, "contiguous", _never, own=sin).blocked_by is None
