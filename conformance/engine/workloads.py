"""The aten overloads representative model workloads reach: the default fallback set.

Each workload (a tiny Qwen2 forward and greedy generate with and without a padded attention
mask, a small CNN training step, the transformers attention-mask pipeline with SDPA, a
torch.save/torch.load round trip, torch.export to the core ATen set; the models are
engine/workload_models.py's) runs on CPU under a dispatch mode that records every aten
overload it calls, and, for overloads with a composite kernel, what that kernel calls (the path
of a backend without its own kernel; engine/workload_calls.py). The result is a golden list per
torch minor, `conformance/workloads/torch-<major.minor>.txt`, refreshed with
`python -m conformance.measure.record_workloads` and checked by tests/engine/test_workloads.py.
A run walks the list with the dispatcher's view of the backend under test
(`discovery.how_reached`): the overloads it reaches through its boxed fallback are the default
fallback set. Nothing in it names a backend.

The same pass records the arguments of the calls (shapes, dtypes, option values, the values of
small integer and bool tensors; never floating values), at most
`workload_calls.CALLS_PER_OVERLOAD` distinct ones per overload, in
`torch-<major.minor>-calls.jsonl` beside the list: the model shapes samples/models.py replays.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from conformance.engine.discovery import how_reached
from conformance.engine.workload_calls import OverloadRecorder, select_calls
from conformance.engine.workload_models import (
    attention_masks,
    cnn_train_step,
    export_core_aten,
    qwen2_generate,
    save_load,
)

# package data (pyproject.toml), so an installed suite has them too
WORKLOADS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads"
)
EXCLUDED_FILE = os.path.join(WORKLOADS_DIR, "excluded.toml")


@dataclass(frozen=True)
class Workload:
    """One representative workload: its name and the function that runs it on CPU."""

    name: str
    run: Callable[[], object]
    needs: str = ""  # an optional module the workload imports (skipped if missing)


WORKLOADS = (
    Workload("qwen2_generate", qwen2_generate, needs="transformers"),
    Workload("cnn_train_step", cnn_train_step),
    Workload("attention_masks", attention_masks),
    Workload("save_load", save_load),
    Workload("export_core_aten", export_core_aten, needs="transformers"),
)


@dataclass
class Reach:
    """How one overload was reached: called by workloads, or inside composite overloads."""

    workloads: set[str] = field(default_factory=set)
    inside: set[str] = field(default_factory=set)


@dataclass
class Recording:
    """What one pass over the workloads recorded: the graph of the golden list and the kept
    calls of each overload (`select_calls`)."""

    graph: dict[str, Reach]
    calls: dict[str, list[dict]]


def record(workloads: tuple[Workload, ...] = WORKLOADS) -> dict[str, Reach]:
    """{overload: Reach} over the workloads, recorded on CPU (`recording`)."""
    return recording(workloads).graph


def recording(workloads: tuple[Workload, ...] = WORKLOADS) -> Recording:
    """The graph and the calls of the workloads, recorded on CPU. Attention runs SDPA's math
    backend: the one PyTorch picks for a PrivateUse1 device that registers no
    `_fused_sdp_choice` (a backend that does is tested on its registered kernels)."""
    graph: dict[str, Reach] = {}
    candidates: dict[str, dict[str, dict]] = {}
    for workload in workloads:
        if workload.needs:
            __import__(workload.needs)  # ImportError names what to install
        recorder = OverloadRecorder()
        with sdpa_kernel(SDPBackend.MATH), recorder:
            workload.run()
        for name in recorder.top:
            graph.setdefault(name, Reach()).workloads.add(workload.name)
        for name, callers in recorder.inside.items():
            graph.setdefault(name, Reach()).inside.update(callers)
        for name, calls in recorder.calls.items():
            kept = candidates.setdefault(name, {})
            for key, call in calls.items():
                if call and key not in kept:
                    kept[key] = call
    calls = {name: select_calls(list(c.values())) for name, c in candidates.items() if c}
    return Recording(graph, calls)


def calls_text(calls: dict[str, list[dict]]) -> str:
    """One JSON object per line, sorted by overload, then by text."""
    lines = sorted(
        (name, json.dumps(call, allow_nan=False)) for name, kept in calls.items() for call in kept
    )
    return "".join(f"{line}\n" for _, line in lines)


def parse_calls(text: str) -> dict[str, list[dict]]:
    calls: dict[str, list[dict]] = {}
    for line in text.splitlines():
        if line.strip():
            call = json.loads(line)
            calls.setdefault(call["op"], []).append(call)
    return calls


def golden_text(graph: dict[str, Reach]) -> str:
    """One overload per line: `name  # workloads: a, b; inside: x, y`."""
    lines = []
    for name in sorted(graph):
        reach = graph[name]
        parts = [f"workloads: {', '.join(sorted(reach.workloads))}"] if reach.workloads else []
        parts += [f"inside: {', '.join(sorted(reach.inside))}"] if reach.inside else []
        lines.append(f"{name}  # {'; '.join(parts)}")
    return "\n".join(lines) + "\n"


def parse_golden(text: str) -> dict[str, Reach]:
    graph: dict[str, Reach] = {}
    for line in text.splitlines():
        name, _, comment = line.partition("#")
        name = name.strip()
        if not name:
            continue
        reach = graph.setdefault(name, Reach())
        for part in comment.split(";"):
            key, _, values = part.partition(":")
            names = {v.strip() for v in values.split(",") if v.strip()}
            if key.strip() == "workloads":
                reach.workloads |= names
            elif key.strip() == "inside":
                reach.inside |= names
    return graph


def reached_through_fallback(graph: dict[str, Reach], how: Callable[[str], str]) -> list[str]:
    """The overloads of `graph` a backend reaches through its boxed fallback when running the
    workloads. `how(overload)` is discovery.how_reached for the backend: from each overload the
    workloads call, a `kernel` ends the path (tested natively), a `backend fallback` ends it in
    the set, any other (composite) kernel continues into what that kernel calls."""
    return _walk(graph, how)[0]


def reached_through_default_kernels(
    graph: dict[str, Reach], how: Callable[[str], str]
) -> list[str]:
    """The overloads of `graph` the backend runs through torch's own composite kernels (a
    `default backend kernel` or a `math kernel`) on the way from the workloads to its kernels
    and fallback: what they compute is done by the overloads they call."""
    return _walk(graph, how)[1]


def _walk(
    graph: dict[str, Reach], how: Callable[[str], str]
) -> tuple[list[str], list[str], list[str]]:
    callees: dict[str, set[str]] = {}
    for name, reach in graph.items():
        for caller in reach.inside:
            callees.setdefault(caller, set()).add(name)
    todo = [name for name, reach in graph.items() if reach.workloads]
    seen = set(todo)
    fallback, composite, kernels = set(), set(), set()
    while todo:
        name = todo.pop()
        kind = how(name)
        if kind == "backend fallback":
            fallback.add(name)
        elif kind == "kernel":
            kernels.add(name)
        else:
            if kind != "none":
                composite.add(name)
            for callee in callees.get(name, ()):
                if callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
    return sorted(fallback), sorted(composite), sorted(kernels)


def minor_of(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def golden_path(version: str | None = None, directory: str = WORKLOADS_DIR) -> str:
    """The list recorded for this torch minor (where it would be written)."""
    major, minor = minor_of(version or torch.__version__)
    return os.path.join(directory, f"torch-{major}.{minor}.txt")


def nearest_golden_path(version: str | None = None, directory: str = WORKLOADS_DIR) -> str:
    """This torch minor's list, else the newest older one, else the oldest: models reach much
    the same overloads across neighbouring releases."""
    want = minor_of(version or torch.__version__)
    found = {}
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
        m = re.fullmatch(r"torch-(\d+)\.(\d+)\.txt", name)
        if m:
            found[(int(m.group(1)), int(m.group(2)))] = os.path.join(directory, name)
    if not found:
        raise FileNotFoundError(
            f"no workload list in {directory}: run python -m conformance.measure.record_workloads"
        )
    older = [v for v in found if v <= want]
    return found[max(older)] if older else found[min(found)]


def calls_path(list_path: str) -> str:
    """The calls file beside a golden list: torch-X.Y.txt -> torch-X.Y-calls.jsonl."""
    return re.sub(r"\.txt$", "", list_path) + "-calls.jsonl"


def nearest_calls_path(version: str | None = None, directory: str = WORKLOADS_DIR) -> str | None:
    """The calls file beside the nearest golden list (`nearest_golden_path`), or None when
    that list has none (or there is no list): no model calls for this torch."""
    try:
        path = calls_path(nearest_golden_path(version, directory))
    except FileNotFoundError:
        return None
    return path if os.path.exists(path) else None


def read_golden(path: str) -> dict[str, Reach]:
    """The golden graph of this torch's list (or the nearest), without overloads this torch
    does not have."""
    with open(path) as f:
        graph = parse_golden(f.read())
    return {name: reach for name, reach in graph.items() if _exists(name)}


def model_fallback_overloads(version: str | None = None) -> list[str]:
    """The default fallback set: overloads the representative models reach through the boxed
    fallback of the backend that is loaded."""
    return reached_through_fallback(read_golden(nearest_golden_path(version)), how_reached)


def model_composite_overloads(version: str | None = None) -> list[str]:
    """Of `model_default_kernel_overloads`, those the workloads call directly (e.g. gelu, run as
    gelu.out): no case of their own, but their gradients are what training computes on the
    device (the -grad cases)."""
    graph = read_golden(nearest_golden_path(version))
    return [o for o in reached_through_default_kernels(graph, how_reached) if graph[o].workloads]


def model_overloads(version: str | None = None) -> list[str]:
    """What the representative models need of the loaded backend: the overloads they reach
    that end on one of its kernels or on its boxed fallback."""
    graph = read_golden(nearest_golden_path(version))
    fallback, _, kernels = _walk(graph, how_reached)
    return sorted({*fallback, *kernels})


def model_default_kernel_overloads(version: str | None = None) -> list[str]:
    """The overloads the representative models reach that the loaded backend runs through
    torch's own composite kernels (it registered no kernel for them, and no fallback runs)."""
    return reached_through_default_kernels(read_golden(nearest_golden_path(version)), how_reached)


def excluded(path: str = EXCLUDED_FILE) -> dict[str, str]:
    """{overload: reason} the default run leaves out of the model-derived set: overloads whose
    results the suite cannot compare yet (random draws, ...). Never a backend's bug: those go
    to the expectations manifests."""
    # here, not at the top: Python 3.10 (requires-python) has no tomllib, and only this needs it
    import tomllib

    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return {e["overload"]: e["reason"] for e in data.get("excluded", [])}


def _exists(overload: str) -> bool:
    name, _, tag = overload.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{name}", tag)
        return True
    except RuntimeError:
        return False
