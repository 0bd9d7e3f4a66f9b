"""The results folder of a run: one `CaseRecord` JSON line per case, flushed as each case ends,
and `run.json` (docs/RESULTS.md). Owned by one `Recorder` object per process."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from typing import IO, Any

from conformance.record import CaseRecord


class Recorder:
    """Writes DIR/cases-<worker>.jsonl (this process's cases) and DIR/run.json."""

    def __init__(self, directory: str, worker: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, f"cases-{worker}.jsonl")
        self._file: IO[str] | None = None

    def clear(self) -> None:
        """Start a run with no case lines from an earlier run in the same directory."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if name.startswith("cases-") and name.endswith(".jsonl"):
                os.remove(os.path.join(self.directory, name))

    def write(self, record: CaseRecord) -> None:
        """Append one line and fsync it: a crash or SIGKILL loses nothing already measured."""
        if self._file is None:
            os.makedirs(self.directory, exist_ok=True)
            self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - open for the run
        self._file.write(json.dumps(record.to_json(), default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def write_run_info(self, info: dict[str, Any]) -> None:
        """DIR/run.json, rewritten atomically (start of run, then end with counts)."""
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, "run.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f, indent=2, default=str)
        os.replace(tmp, path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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
