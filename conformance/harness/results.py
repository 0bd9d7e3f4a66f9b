"""Per-case JSON lines, appended and flushed as each case ends (docs/RESULTS.md)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from typing import Any


class ResultsWriter:
    """Appends one JSON object per case to DIR/cases-<worker>.jsonl."""

    def __init__(self, directory: str, worker: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.path = os.path.join(directory, f"cases-{worker}.jsonl")
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - kept open for the run

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def clear_case_files(directory: str) -> None:
    """Start a run with no case lines from an earlier run in the same directory."""
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if name.startswith("cases-") and name.endswith(".jsonl"):
            os.remove(os.path.join(directory, name))


def write_run_info(directory: str, info: dict[str, Any]) -> None:
    """DIR/run.json, rewritten atomically (start of run, then end with counts)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "run.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f, indent=2, default=str)
    os.replace(tmp, path)


def run_info(torch_version: str, backend: str, device: str, allocator: str) -> dict[str, Any]:
    return {
        "torch": torch_version,
        "backend": backend,
        "device": device,
        "allocator": allocator,
        "python": platform.python_version(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "finished": None,
        "argv": sys.argv,
        "counts": {},
    }
