"""The results folder of a run: one `CaseRecord` JSON line per case, flushed as each case ends,
and `run.json` (docs/RESULTS.md). Owned by one `Recorder` object per process."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from typing import Any

from conformance.record import CaseRecord


class Recorder:
    """Writes DIR/cases-<worker>.jsonl (this process's cases) and DIR/run.json."""

    def __init__(self, directory: str, worker: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, f"cases-{worker}.jsonl")
        self._fd: int | None = None

    def clear(self) -> None:
        """Start a run with no case lines from an earlier run in the same directory."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if name.startswith("cases-") and name.endswith(".jsonl"):
                os.remove(os.path.join(self.directory, name))

    def write(self, record: CaseRecord) -> None:
        """Append one line with one write(2): once it returns the line is the kernel's, so a
        crash, abort or SIGKILL of this process loses nothing already measured. No fsync: it
        guards only against the machine going down, and cost up to 30 ms a case on a busy disk."""
        if self._fd is None:
            os.makedirs(self.directory, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, (json.dumps(record.to_json(), default=str) + "\n").encode())

    def write_run_info(self, info: dict[str, Any]) -> None:
        """DIR/run.json, rewritten atomically (start of run, then end with counts)."""
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, "run.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f, indent=2, default=str)
        os.replace(tmp, path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def run_info(torch_version: str, backend: str, device: str, allocator: str) -> dict[str, Any]:
    """The start-of-run content of run.json."""
    return {
        "torch": torch_version,
        "backend": backend,
        "device": device,
        "allocator": allocator,
        "python": platform.python_version(),
        "started": now(),
        "finished": None,
        "argv": sys.argv,
        "counts": {},
    }


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()
