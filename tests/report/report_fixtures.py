"""Synthetic results folders (docs/RESULTS.md format) shared by the report tests."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

OPS = [("masked_fill_", "Scalar"), ("add", "Tensor"), ("abs", "default"), ("sum", "dim_IntList")]
DTYPES = ["float32", "int64"]
LAYOUTS = ["contiguous", "transposed", "offset"]
PATHS = ["native", "fallback"]


def status_of(op: str, dtype: str, layout: str, path: str, allocator: str) -> str:
    """Deterministic statuses: a few failures, a crash, an xfail, an xpass and skips."""
    if op == "masked_fill_" and layout == "transposed" and path == "native":
        return "failed" if allocator == "guard" else "passed"
    if op == "sum" and dtype == "int64" and layout == "offset" and path == "native":
        return "crashed"
    if op == "abs" and dtype == "int64" and path == "fallback":
        return "xfailed"
    if op == "add" and layout == "offset" and dtype == "float32" and path == "fallback":
        return "xpassed"
    if op == "sum" and dtype == "float32" and layout == "contiguous":
        return "skipped"
    return "passed"


def make_case(op: str, overload: str, dtype: str, layout: str, path: str, **extra: object) -> dict:
    """One case line."""
    name = f"{op}.{overload}" if overload != "default" else op
    key = f"{name}-{dtype}-{layout}-{path}"
    status = extra.pop("status")
    return {
        "id": f"test_matches_cpu[{key}]",
        "op": op,
        "overload": overload,
        "dtype": dtype,
        "layout": layout,
        "path": path,
        "status": status,
        "check": {"failed": "memory", "crashed": "crash", "xpassed": "values"}.get(status),
        "max_abs_err": None,
        "max_rel_err": None,
        "samples": 3,
        "duration": 0.01,
        "message": f"red zone after block | byte 4 <{op}>"
        if status == "failed"
        else ("Fatal Python error: Segmentation fault" if status == "crashed" else ""),
        "repro": f"pytest conformance -k '{key}'",
        **extra,
    }


def write_results(
    root: Path,
    name: str = "conformance-2.8-guard",
    torch: str = "2.8.0",
    allocator: str = "guard",
    truncate: bool = False,
    finished: bool = True,
) -> Path:
    """Write a results folder ``root/<name>`` for one session; return its path."""
    out = root / name
    out.mkdir(parents=True)
    cases = [
        make_case(
            op,
            ov,
            dt,
            ly,
            pa,
            status=status_of(op, dt, ly, pa, allocator),
            torch=torch,
            backend="echo_npu",
            allocator=allocator,
        )
        for (op, ov), dt, ly, pa in itertools.product(OPS, DTYPES, LAYOUTS, PATHS)
    ]
    half = len(cases) // 2
    for worker, chunk in (("gw0", cases[:half]), ("gw1", cases[half:])):
        text = "".join(json.dumps(c) + "\n" for c in chunk)
        if truncate and worker == "gw1":
            text += json.dumps(chunk[0])[:37]  # a crash mid-write
        (out / f"cases-{worker}.jsonl").write_text(text, encoding="utf-8")
    run = {
        "torch": torch,
        "backend": "echo_npu",
        "device": "npu",
        "allocator": allocator,
        "python": "3.11.7",
        "started": "2026-11-22T10:00:00",
        "finished": "2026-11-22T10:05:00" if finished else None,
        "argv": ["pytest", "conformance"],
        "counts": {},
    }
    (out / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return out
