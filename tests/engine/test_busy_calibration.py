"""The `_sleep` hold's calibration (engine/busy.py) on a simulated device timeline (issue 55, seen
on an H200): CUDA loads a kernel's module at its first launch, and a clock rises under load. A
rate taken from the first timed launch made every hold 18 times shorter than asked, and the
contract's event-elapsed-time check failed a correct runtime."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import busy

RATE = 1_000_000.0  # cycles per ms at full clock
LOAD_MS = 9.0  # the first launch's module load, held on the stream


class Timeline:
    """A device stream whose work runs as it is queued: `now` advances by each launch."""

    def __init__(self, slow_first: float = 1.0) -> None:
        self.now = 0.0
        self.launches: list[int] = []
        self.slow_first = slow_first  # the first timed runs at a lower clock

    def sleep(self, cycles: int) -> None:
        load = LOAD_MS if not self.launches else 0.0
        clock = self.slow_first if len(self.launches) <= 2 else 1.0
        self.launches.append(cycles)
        self.now += load + cycles / (RATE * clock)


@pytest.fixture
def timeline(monkeypatch):
    line = Timeline(slow_first=0.5)

    class Event:
        def __init__(self, device=None, enable_timing=False):
            self.at = None

        def record(self, stream=None):
            self.at = line.now

        def query(self):
            return False  # still queued when asked: the stream was busy

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return other.at - self.at

    class Accelerator:
        @staticmethod
        def current_stream(index=0):
            return object()

        @staticmethod
        def synchronize(index=None):
            pass

    monkeypatch.setattr(torch, "Event", Event)
    monkeypatch.setattr(torch, "accelerator", Accelerator)
    return line


def test_a_hold_lasts_at_least_what_was_asked(timeline):
    hold = busy._calibrate_sleep(torch.device("cpu"), timeline.sleep, "fake")
    assert hold.how == "_sleep", hold.why
    before = timeline.now
    hold.launch(30.0)
    held = timeline.now - before
    assert 30.0 * 0.99 <= held <= 30.0 * 1.01, (held, hold.what)
