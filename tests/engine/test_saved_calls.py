"""Sample calls saved to the disk cache and loaded back (engine/calls.py), as every run after
the first reads them (issue 55, seen on an H200: torch.load gives tensors whose storage cannot be
resized, and `_linalg_det.result` with such out= arguments crashed CPU while the suite measured
its exactness, failing the device's cases); and the suite's own CPU computations forked apart
(samples/guarded.py `forked_call`), so that such a crash never lands in a case's verdict."""

from __future__ import annotations

import ctypes

import torch

from conformance.engine.calls import Call, load_calls, save_calls
from conformance.samples.guarded import forked_call


def _round_trip(call: Call, tmp_path) -> Call:
    path = str(tmp_path / "calls.pt")
    save_calls({"": {call.overload: [call]}}, path)
    return load_calls(path)[""][call.overload][0]


def test_a_loaded_out_argument_can_be_resized(tmp_path):
    outs = {
        "result": torch.empty(0),
        "LU": torch.empty(0),
        "pivots": torch.empty(0, dtype=torch.int32),
    }
    call = Call("_linalg_det.result", (torch.randn(3, 5, 5),), outs)
    loaded = _round_trip(call, tmp_path)
    torch.ops.aten._linalg_det.result(*loaded.args, **loaded.kwargs)
    assert loaded.kwargs["LU"].shape == (3, 5, 5)
    assert torch.allclose(loaded.kwargs["result"], torch.linalg.det(call.args[0]))


def test_views_of_one_storage_stay_views_of_one_copy(tmp_path):
    base = torch.arange(6.0)
    loaded = _round_trip(Call("add.Tensor", (base[:4], base[2:]), {}), tmp_path)
    a, b = loaded.args
    assert a.untyped_storage()._cdata == b.untyped_storage()._cdata
    assert (a.storage_offset(), b.storage_offset()) == (0, 2)
    a[2] = 100.0
    assert b[0] == 100.0


def crash() -> None:
    ctypes.string_at(0)  # SIGSEGV


def double(x: int) -> int:
    return 2 * x


def test_a_crash_of_the_suite_s_own_computation_stays_in_its_child():
    assert forked_call(double, (21,)) == (True, 42)
    assert forked_call(crash, ()) == (False, "killed by SIGSEGV")
