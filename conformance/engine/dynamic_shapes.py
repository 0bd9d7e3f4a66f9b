"""The dynamic-shape part of a -compile case (engine/compiling.py runs the rest).

Where two of the case's samples are one call at two sizes (the same arguments but for their
tensors' sizes), else for the first sample and the same call with its highest-rank tensors
repeated along dim 0, the call is compiled once with `dynamic=None` and run at the first size,
the second (Dynamo recompiles with symbolic sizes), then both again: every result must equal
CPU's eager one, and the repeats must compile nothing (a recompile is named with the count of
graphs). What CPU cannot run, or Inductor cannot compile on CPU either, claims nothing; a
result Inductor gives on CPU too is torch's difference (`torch-bug`). The record keeps
`compiled_graphs` and `dynamic` (what was checked, or why not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from conformance.engine.checks import Mismatch, first_line, invoke
from conformance.engine.compare import ErrorStats, Scale
from conformance.engine.compiling import compiled, dynamic_pair, same_outputs, sample_sizes
from conformance.engine.placing import Materialized, PlacedCall


@dataclasses.dataclass
class CompileEvidence:
    """What a -compile case's dynamic-shape check measured (the case record keeps it)."""

    graphs: int | None = None  # graphs Dynamo compiled for the two sizes and their repeats
    dynamic: str = "not run"

    def as_record(self) -> dict[str, Any]:
        return {"compiled_graphs": self.graphs, "dynamic": self.dynamic}


class DynamicMismatch(Mismatch):
    """A dynamic-shape failure, with the sample it failed at (for the repro)."""

    def __init__(self, message: str, placed: PlacedCall) -> None:
        super().__init__("compile", message)
        self.placed = placed


Make = Callable[[Any], tuple[Any, Any]]  # where -> (args, kwargs) of one call, fresh


def run_dynamic(
    op: Any,
    placements: list[PlacedCall],
    device: torch.device | str,
    compiler: str,
    scale: Scale,
    stats: ErrorStats,
    evidence: CompileEvidence,
) -> str | None:
    """The dynamic-shape check (module docstring); fills `evidence`, raises DynamicMismatch,
    returns a torch bug (Inductor on CPU gives the device's result) or None.
    Without two samples of one call at two sizes, the first sample is the first size and the
    same call with every tensor repeated along dim 0 the second (judged against CPU on those
    inputs: where CPU cannot run it, nothing is claimed)."""
    if not placements:
        return None
    pair = dynamic_pair(placements)
    if pair is not None:
        small, large = sorted(pair, key=lambda p: sum(map(_numel, sample_sizes(p))))
        sizes = (small, large)
        make_small, make_large = _made(small), _made(large)
    else:
        small = large = placements[0]
        sizes = (small, None)
        make_small, make_large = _made(small), _doubled(small)
    count = [0]
    inner = torch._dynamo.lookup_backend(compiler)

    def counting(gm: Any, example_inputs: Any) -> Any:
        count[0] += 1
        return inner(gm, example_inputs)

    fn = compiled(op, counting, dynamic=None)
    steps = [("first size", make_small, small), ("second size", make_large, large)]
    steps += [(f"{name} again", make, placed) for name, make, placed in steps]
    shapes: list[Any] = []
    for name, make, placed in steps:
        args, kwargs = make("cpu")
        expected = invoke(op, Materialized(tuple(args), dict(kwargs), []))
        if expected.exc is not None:
            evidence.dynamic = f"cpu raised at the {name}: nothing claimed"
            return None
        shapes.append(_shapes(args, kwargs))
        where = f"compiled with dynamic shapes ({compiler!r}), the {name} {shapes[-1]}"
        before = count[0]
        args, kwargs = make(device)
        try:
            got = fn(args, kwargs)
        except Exception as exc:  # noqa: BLE001 - a verdict, unless CPU's compile fails too
            problem = f"{type(exc).__name__}: {first_line(exc)}"
            on_cpu = _on_cpu(op, compiler, [make for _, make, _ in steps[: len(shapes)]])
            if isinstance(on_cpu, str):
                evidence.dynamic = f"cannot compile it with dynamic shapes on cpu either ({on_cpu})"
                return None
            raise DynamicMismatch(f"{where}: raised {problem}", placed) from None
        if name.endswith("again") and count[0] > before:
            raise DynamicMismatch(
                f"{where}: compiled again ({count[0]} graphs for 2 sizes): a call seen before "
                "must reuse its graph",
                placed,
            )
        try:
            same_outputs(op, where, got, expected.result, scale, stats, "cpu")
        except Mismatch as exc:
            on_cpu = _on_cpu(op, compiler, [make for _, make, _ in steps[: len(shapes)]])
            if isinstance(on_cpu, str):
                raise DynamicMismatch(exc.message, placed) from None
            try:
                same_outputs(op, where, got, on_cpu, scale, ErrorStats(), "cpu compiled")
            except Mismatch:
                raise DynamicMismatch(exc.message, placed) from None
            evidence.dynamic = f"the {name}: Inductor on cpu gives the device's result"
            return (
                f"{exc.message}; torch.compile(backend={compiler!r}, dynamic shapes) on cpu "
                "gives the device's result: the difference is torch's, not the device's"
            )
    evidence.graphs = count[0]
    how = "two samples" if sizes[1] is not None else "a sample, then repeated on dim 0"
    evidence.dynamic = f"{shapes[0]} and {shapes[1]} ({how}): results equal, no recompile"


def _on_cpu(op: Any, compiler: str, makes: list[Make]) -> Any:
    """The same dynamic-shape calls compiled on CPU: the last one's result, or the error (a
    str) where CPU cannot compile or run them either."""

    fn = compiled(op, compiler, dynamic=None)
    result = None
    try:
        for make in makes:
            result = fn(*make("cpu"))
    except Exception as exc:  # noqa: BLE001 - torch cannot compile it this way anywhere
        return f"{type(exc).__name__}: {first_line(exc)}"
    return result


def _made(placed: PlacedCall) -> Make:
    def make(where: Any) -> tuple[Any, Any]:
        m = placed.materialize(where)
        return m.args, m.kwargs

    return make


def _doubled(placed: PlacedCall) -> Make:
    """The sample's call with its tensors of the highest rank (>= 1) and the same dim 0
    repeated along dim 0, contiguous: lower-rank tensors broadcast against the trailing dims
    and stay as they are."""

    def make(where: Any) -> tuple[Any, Any]:
        m = placed.materialize("cpu")
        tensors = [x for x in tree_leaves((m.args, m.kwargs)) if isinstance(x, torch.Tensor)]
        rank = max((t.dim() for t in tensors), default=0)
        lead = next((t.shape[0] for t in tensors if t.dim() == rank and rank), None)

        def grow(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            if rank and x.dim() == rank and x.shape[0] == lead:
                return torch.cat([x, x]).to(where)
            return x.to(where)

        return tree_map(grow, (m.args, m.kwargs))

    return make


def _shapes(args: Any, kwargs: Any) -> list[tuple[int, ...]]:
    leaves = tree_leaves((args, kwargs))
    return [tuple(x.shape) for x in leaves if isinstance(x, torch.Tensor)]


def _numel(size: tuple[int, ...]) -> int:
    n = 1
    for d in size:
        n *= d
    return n
