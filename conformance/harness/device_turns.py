"""One device-owning runner at a time, across every process of a run, for a device one process
may open (the probe's `exclusive` fact: a second process that opens it fails, as a VFIO device
or a vendor runtime that locks the card does).

The owner of a runner (the plain pytest process, or each xdist worker) takes the turn before it
starts a runner and gives it back when that runner ends. An owner that waits for the turn says
so (a marker file in the run folder); the holder closes its runner when another owner waits, so
no owner idles with the device while another has cases to run (an xdist worker waiting for its
next item would otherwise hold it until the run ends). It first keeps the turn for `TURN_FACTOR`
times what taking it cost (its runner's start, the device's initialisation: measured up to the
end of its first case), so handing over costs at most a fifth of the device's time: a holder
that handed over after every case spent most of a run starting runners on a device that
initialises slowly.
"""

from __future__ import annotations

import glob
import os
import time

from filelock import FileLock

#: a holder keeps the turn at least this many times as long as taking it took
TURN_FACTOR = 4.0


class DeviceTurns:
    """The run's turns on the device (the lock and the markers live in the run folder)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.lock = FileLock(os.path.join(folder, "device.lock"))
        self.marker = os.path.join(folder, f"device.wanted.{os.getpid()}")
        self.taken = 0.0  # when this owner last got the turn (monotonic)
        self.ready: float | None = None  # when its runner ended its first case on the turn

    def take(self) -> DeviceTurns:
        """Wait for the turn (blocks while another owner's runner has the device)."""
        self.ready = None
        with open(self.marker, "w"):
            pass
        try:
            self.lock.acquire()
        finally:
            os.remove(self.marker)
        self.taken = time.monotonic()
        return self

    def release(self) -> None:
        self.lock.release()

    def case_done(self) -> None:
        """The holder's runner ended a case (the first one ends the cost of taking the turn)."""
        if self.ready is None:
            self.ready = time.monotonic()

    def others_waiting(self) -> bool:
        """Whether another owner waits for the turn."""
        pattern = os.path.join(self.folder, "device.wanted.*")
        return any(path != self.marker for path in glob.glob(pattern))

    def should_hand_over(self) -> bool:
        """Whether the holder should close its runner now: another owner waits and this one
        has held the turn `TURN_FACTOR` times as long as taking it took."""
        if not self.others_waiting():
            return False
        if self.ready is None:
            return True
        return time.monotonic() - self.ready >= TURN_FACTOR * (self.ready - self.taken)
