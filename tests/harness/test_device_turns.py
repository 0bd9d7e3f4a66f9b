"""The turns on a device one process may open (harness/device_turns.py): a holder hands over
when another owner waits, after keeping the turn TURN_FACTOR times what taking it cost."""

from __future__ import annotations

from conformance.harness import device_turns
from conformance.harness.device_turns import TURN_FACTOR, DeviceTurns


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_holder_keeps_the_turn_for_a_multiple_of_its_cost_then_hands_over(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(device_turns.time, "monotonic", clock)
    holder = DeviceTurns(str(tmp_path)).take()
    clock.now += 2.0  # a runner start and a device initialisation of 2 s, then the first case
    holder.case_done()
    assert not holder.should_hand_over()  # nobody waits
    (tmp_path / "device.wanted.1").write_text("")  # another owner waits
    clock.now += TURN_FACTOR * 2.0 - 0.5
    holder.case_done()
    assert not holder.should_hand_over()
    clock.now += 0.5
    assert holder.should_hand_over()
    holder.release()


def test_a_turn_taken_again_measures_its_cost_again(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(device_turns.time, "monotonic", clock)
    turns = DeviceTurns(str(tmp_path))
    turns.take()
    clock.now += 10.0
    turns.case_done()
    turns.release()
    turns.take()
    (tmp_path / "device.wanted.1").write_text("")
    assert turns.should_hand_over()  # no case ended on this turn yet: nothing to amortise
    clock.now += 0.1
    turns.case_done()
    clock.now += TURN_FACTOR * 0.1
    assert turns.should_hand_over()
    turns.release()
