"""One device-owning runner at a time, across every process of a run, for a device one process
may open (the probe's `exclusive` fact: a second process that opens it fails, as a VFIO device
or a vendor runtime that locks the card does).

The owner of a runner (the plain pytest process, or each xdist worker) takes the turn before it
starts a runner and gives it back when that runner ends. An owner that waits for the turn says
so (a marker file in the run folder); the holder, after each case, closes its runner when
another owner waits, so no owner idles with the device while another has cases to run (an xdist
worker waiting for its next item would otherwise hold it until the run ends).
"""

from __future__ import annotations

import glob
import os

from filelock import FileLock


class DeviceTurns:
    """The run's turns on the device (the lock and the markers live in the run folder)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.lock = FileLock(os.path.join(folder, "device.lock"))
        self.marker = os.path.join(folder, f"device.wanted.{os.getpid()}")

    def take(self) -> DeviceTurns:
        """Wait for the turn (blocks while another owner's runner has the device)."""
        with open(self.marker, "w"):
            pass
        try:
            self.lock.acquire()
        finally:
            os.remove(self.marker)
        return self

    def release(self) -> None:
        self.lock.release()

    def others_waiting(self) -> bool:
        """Whether another owner waits for the turn."""
        pattern = os.path.join(self.folder, "device.wanted.*")
        return any(path != self.marker for path in glob.glob(pattern))
