"""An OpInfo capture whose CPU kernel traps or hangs on one sample loses that sample, never the
run (samples/guarded.py): torch 2.9's mvlgamma of int64 raised SIGFPE in the collecting
process and ended a run against torch_xla before any record."""

from __future__ import annotations

import os
import signal
import time

import torch

from conformance.engine.calls import Call
from conformance.samples import guarded


def _capture(trap: set[int], hang: set[int], skip, started):
    """A capture (module-level: the forked child finds it by name) that traps or hangs."""
    calls = []
    for i in range(5):
        if i in skip:
            continue
        started(i)
        if i in trap:
            os.kill(os.getpid(), signal.SIGFPE)
        if i in hang:
            time.sleep(60)
        calls.append(Call("abs", (torch.full((2,), float(i)),)))
    return {"samples": {"abs": calls}}


def _values(found) -> list[float]:
    return [c.args[0][0].item() for c in found["samples"]["abs"]]


def test_a_trapping_sample_is_skipped_and_the_others_kept():
    assert _values(guarded.guarded(_capture, ({1, 3}, set()))) == [0.0, 2.0, 4.0]


def test_a_hanging_sample_is_skipped_after_the_timeout():
    assert _values(guarded.guarded(_capture, (set(), {2}), timeout=3.0)) == [0.0, 1.0, 3.0, 4.0]


def test_a_capture_that_keeps_dying_gives_no_samples():
    assert guarded.guarded(_capture, (set(range(5)), set())) == {}


def test_a_capture_without_trouble_round_trips_its_calls():
    assert _values(guarded.guarded(_capture, (set(), set()))) == [0.0, 1.0, 2.0, 3.0, 4.0]
