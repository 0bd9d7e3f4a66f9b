"""Synthetic results folders for the store's fast tests: a run.json and one cases file."""

from __future__ import annotations

import json
from pathlib import Path


def write_run(
    folder: Path,
    statuses: dict[str, str],
    started: str = "2026-11-01T02:00:00+00:00",
    torch: str = "2.13.0+cpu",
    environment: dict[str, str] | None = None,
    shard: tuple[int, int] | None = None,
    finished: bool = True,
    exitstatus: int = 0,
    duration: float = 0.01,
    allocator: str = "malloc",
) -> Path:
    """A results folder with one case per ``statuses`` item (`op-dtype` -> status)."""
    folder.mkdir(parents=True)
    meta = {
        "torch": torch,
        "backend": "echo_npu",
        "device": "npu",
        "allocator": allocator,
        "python": "3.11.7",
        "started": started,
        "finished": started.replace(":00+", ":30+") if finished else None,
        "environment": environment or {},
        "checkers": [],
        "compile_environment": {"torch git": "git-" + torch, "backend": "echo_npu 0.1.0"},
        "exitstatus": exitstatus if finished else None,
    }
    if shard is not None:
        meta["shard"] = {"index": shard[0], "count": shard[1], "partition": "hash"}
    (folder / "run.json").write_text(json.dumps(meta))
    lines = []
    for key, status in statuses.items():
        op, dtype = key.split("-")
        lines.append(
            json.dumps(
                {
                    "id": f"test_matches_cpu[{op}-{dtype}-contiguous-native]",
                    "status": status,
                    "op": op,
                    "overload": "",
                    "dtype": dtype,
                    "layout": "contiguous",
                    "path": "native",
                    "check": "values" if status == "failed" else None,
                    "message": f"[values] {op} differs" if status == "failed" else None,
                    "duration": duration,
                    "repro": f"pytest conformance -k {op}",
                    "family": "ops",
                }
            )
        )
    (folder / "cases-gw0.jsonl").write_text("\n".join(lines) + "\n")
    return folder
