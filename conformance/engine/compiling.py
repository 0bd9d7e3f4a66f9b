"""The -compile cases: an overload run through `torch.compile` on the device, judged against
CPU's eager result and the device's own eager result.

The compiler is the device's Inductor backend where it has one (registered with
`register_backend_for_device`, or handed over by its device module: `torch.<dev>.Scheduling`,
as torch._inductor.codegen.common.init_backend_registration asks for), else `aot_eager` (the
device's own kernels behind AOTAutograd), and the run header says which. A sample that cannot be
compiled fails naming the compiled path, unless CPU cannot compile it either (then it is not
applicable, with torch's reason): nothing is skipped silently.

The first sample is also compiled on the device's other index where it has two (inputs on
npu:1 while npu:0 is current): the outputs must be on the inputs' device. Inductor guards the
device only for its GPU types, so a backend's wrapper must allocate on the right index itself.

Dynamic shapes: where two of the case's samples are one call at two sizes (the same arguments
but for their tensors' sizes), the call is compiled once with `dynamic=None` and run at the
first size, the second (Dynamo recompiles with symbolic sizes), then both again: every result
must equal CPU's, and the repeats must compile nothing (a recompile is named with the count of
graphs). The record keeps `compiled_graphs` and `dynamic` (what was checked, or why not).

Besides the first ordinary samples, a -compile case runs the first sample of the `special`
value set (NaN, inf, -0.0, subnormals): a compiled kernel built with finite-math assumptions (a
compiler wrapper adding -ffast-math to Inductor's flags, say) is wrong only there.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from conformance.engine.checks import Mismatch, NotApplicable, first_line, invoke, returned
from conformance.engine.compare import ErrorStats, Scale, compare_values
from conformance.engine.placing import Leaf, Materialized, PlacedCall
from conformance.engine.transfer import read_back

# the cases of one overload: a float and an integer dtype that share a vector width (a kernel
# cache keyed without the dtype hands one the other's kernel), contiguous and strided inputs (a
# kernel that assumes contiguous inputs reads a strided view wrong)
CASE_DTYPES = (torch.float32, torch.int32)
CASE_LAYOUTS = ("contiguous", "noncontiguous")
ORDINARY_SAMPLES = 2  # a C++ compile per graph: the first samples say what the path does
SPECIAL_SAMPLES = 1  # ... and one with NaN, inf, -0.0 and subnormals
MAX_COMPILE_SAMPLES = ORDINARY_SAMPLES + SPECIAL_SAMPLES


def case_dtypes(dtypes: list[torch.dtype]) -> list[torch.dtype]:
    """The dtypes of an overload's -compile cases, from the dtypes it has samples in."""
    return [d for d in CASE_DTYPES if d in dtypes] or dtypes[:1]


def compile_samples(ordinary: list[PlacedCall], special: list[PlacedCall]) -> list[PlacedCall]:
    """The samples a -compile case runs: the first pair of ordinary samples that are one call
    at two sizes (for the dynamic-shape check), else the first ordinary ones; then the first
    special one."""
    pair = dynamic_pair(ordinary)
    chosen = list(pair) if pair is not None else ordinary[:ORDINARY_SAMPLES]
    return chosen + special[:SPECIAL_SAMPLES]


def dynamic_pair(placements: list[PlacedCall]) -> tuple[PlacedCall, PlacedCall] | None:
    """The first two of `placements` that are one call at two non-empty sizes."""
    for i, first in enumerate(placements):
        partner = second_size(first, placements[i + 1 :])
        if partner is not None:
            return first, partner
    return None


def _call_shape(placed: PlacedCall) -> tuple[Any, ...] | None:
    """What two samples must share to be one graph at two sizes: the call's structure, its
    values other than tensors, and each tensor's argument, dtype, rank and side (None: not
    comparable, e.g. a storage argument)."""
    parts: list[Any] = [str(placed.spec)]
    for x in placed.leaves:
        if isinstance(x, Leaf):
            p = x.placement
            parts.append((x.arg, p.base.dtype, len(p.size), x.on_cpu))
        elif isinstance(x, (bool, int, float, str, type(None), torch.dtype)):
            parts.append((type(x).__name__, x))
        else:
            return None
    return tuple(parts)


def _sizes(placed: PlacedCall) -> list[tuple[int, ...]]:
    return [tuple(x.placement.size) for x in placed.leaves if isinstance(x, Leaf)]


def second_size(first: PlacedCall, others: list[PlacedCall]) -> PlacedCall | None:
    """The first of `others` that is `first`'s call at other, non-empty sizes."""
    shape = _call_shape(first)
    if shape is None or not _sizes(first) or 0 in [d for s in _sizes(first) for d in s]:
        return None
    for other in others:
        sizes = _sizes(other)
        if _call_shape(other) == shape and sizes != _sizes(first):
            if all(d != 0 for s in sizes for d in s):
                return other
    return None


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
) -> None:
    """The dynamic-shape check (module docstring); fills `evidence`, raises DynamicMismatch.
    Without two samples of one call at two sizes, the first sample is the first size and the
    same call with every tensor repeated along dim 0 the second (judged against CPU on those
    inputs: where CPU cannot run it, nothing is claimed)."""
    if not placements:
        return
    pair = dynamic_pair(placements)
    if pair is not None:
        small, large = sorted(pair, key=lambda p: sum(map(_numel, _sizes(p))))
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

    def call(args: Any, kwargs: Any) -> Any:
        return op(*args, **kwargs)

    torch._dynamo.reset()
    fn = torch.compile(call, backend=counting, fullgraph=True, dynamic=None)
    steps = [("first size", make_small, small), ("second size", make_large, large)]
    steps += [(f"{name} again", make, placed) for name, make, placed in steps]
    shapes: list[Any] = []
    for name, make, placed in steps:
        args, kwargs = make("cpu")
        expected = invoke(op, Materialized(tuple(args), dict(kwargs), []))
        if expected.exc is not None:
            evidence.dynamic = f"cpu raised at the {name}: nothing claimed"
            return
        shapes.append(_shapes(args, kwargs))
        where = f"compiled with dynamic shapes ({compiler!r}), the {name} {shapes[-1]}"
        before = count[0]
        args, kwargs = make(device)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = fn(args, kwargs)
        except Exception as exc:  # noqa: BLE001 - it compiled at one size: a verdict
            problem = f"{type(exc).__name__}: {first_line(exc)}"
            raise DynamicMismatch(f"{where}: raised {problem}", placed) from None
        if name.endswith("again") and count[0] > before:
            raise DynamicMismatch(
                f"{where}: compiled again ({count[0]} graphs for 2 sizes): a call seen before "
                "must reuse its graph",
                placed,
            )
        outputs = {j: t for j, t, _ in returned(op._schema, got)}
        for i, e, _ in returned(op._schema, expected.result):
            if i not in outputs:
                raise DynamicMismatch(f"{where}: output {i} missing", placed)
            try:
                _same(f"{where}: output {i}", outputs[i], e, scale, stats, "cpu")
            except Mismatch as exc:
                raise DynamicMismatch(exc.message, placed) from None
    evidence.graphs = count[0]
    how = "two samples" if sizes[1] is not None else "a sample, then repeated on dim 0"
    evidence.dynamic = f"{shapes[0]} and {shapes[1]} ({how}): results equal, no recompile"


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


def run_compile_sample(
    op: Any,
    placed: PlacedCall,
    device: torch.device | str,
    compiler: str,
    scale: Scale,
    stats: ErrorStats,
    other: torch.device | None = None,
) -> None:
    """Compile `op` for one sample on the device and compare. Raises Mismatch (check
    `compile`) or NotApplicable. `other`: compile it there too (another index of the device,
    while `device` is current) and check the outputs' device and values."""
    cpu = placed.materialize("cpu")
    expected = invoke(op, cpu)
    if expected.exc is not None:
        raise NotApplicable("cpu raised: error parity is judged by the forward case")
    eager_dev = placed.materialize(device)
    eager = invoke(op, eager_dev)
    if eager.exc is not None:
        raise NotApplicable("the device raised eagerly: the forward case judges it")
    dev = placed.materialize(device)
    try:
        got = _compiled(op, compiler, dev)
    except Exception as exc:  # noqa: BLE001 - a compile failure is a verdict, unless CPU's too
        problem = f"{type(exc).__name__}: {first_line(exc)}"
        try:
            _compiled(op, compiler, placed.materialize("cpu"))
        except Exception as cpu_exc:  # noqa: BLE001 - torch cannot compile it anywhere
            raise NotApplicable(
                f"torch.compile(backend={compiler!r}) cannot compile it on cpu either "
                f"({type(cpu_exc).__name__}: {first_line(cpu_exc)})"
            ) from None
        raise Mismatch(
            "compile",
            f"torch.compile(backend={compiler!r}) on the device raised {problem}; it compiles "
            "on cpu",
        ) from None
    where = f"compiled (torch.compile, backend={compiler!r})"
    outputs = {j: t for j, t, _ in returned(op._schema, got)}
    eager_out = {j: t for j, t, _ in returned(op._schema, eager.result)}
    for i, e, _ in returned(op._schema, expected.result):
        if i not in outputs:
            raise Mismatch("compile", f"{where}: output {i} missing")
        name = f"{where}: output {i}"
        _same(name, outputs[i], e, scale, stats, "cpu")
        if i in eager_out:
            _same(name, outputs[i], read_back(eager_out[i]), scale, stats, "the device's eager")
    for (leaf, _, view), (_, _, cview) in zip(dev.bases, cpu.bases, strict=True):
        if leaf.written:
            _same(f"{where}: {leaf.arg} (written)", view, cview, scale, stats, "cpu")
    if other is not None:
        _on_other_index(op, compiler, placed, other, device, expected.result, scale, stats)


def _on_other_index(
    op: Any,
    compiler: str,
    placed: PlacedCall,
    other: torch.device,
    current: torch.device | str,
    expected: Any,
    scale: Scale,
    stats: ErrorStats,
) -> None:
    """The sample compiled with its inputs on `other` while `current` is the current device."""
    where = f"compiled on {other} while {current} is current (torch.compile, {compiler!r})"
    try:
        got = _compiled(op, compiler, placed.materialize(other))
    except Exception as exc:  # noqa: BLE001 - it compiled on the current device: a verdict
        problem = f"{type(exc).__name__}: {first_line(exc)}"
        raise Mismatch("compile", f"{where}: raised {problem}") from None
    outputs = {j: t for j, t, _ in returned(op._schema, got)}
    for i, e, _ in returned(op._schema, expected):
        out = outputs.get(i)
        if isinstance(out, torch.Tensor) and out.device != torch.device(other):
            raise Mismatch(
                "compile",
                f"{where}: output {i} is on {out.device}, its inputs on {other} (the wrapper "
                "allocates on the current device: a missing device guard)",
            )
        if i in outputs:
            _same(f"{where}: output {i}", out, e, scale, stats, "cpu")


def _compiled(op: Any, compiler: str, m: Materialized) -> Any:
    def call(args: Any, kwargs: Any) -> Any:
        return op(*args, **kwargs)

    # every sample is a compile of its own: dynamo would count each as a recompile of `call`
    torch._dynamo.reset()
    fn = torch.compile(call, backend=compiler, fullgraph=True, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(m.args, m.kwargs)


def _same(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    scale: Scale,
    stats: ErrorStats,
    what: str,
) -> None:
    if not isinstance(actual, torch.Tensor):
        raise Mismatch("compile", f"{name}: returned {type(actual).__name__}, a tensor expected")
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise Mismatch(
            "compile",
            f"{name}: {actual.dtype}{list(actual.shape)}, {what} gives "
            f"{expected.dtype}{list(expected.shape)}",
        )
    try:
        compare_values(name, read_back(actual), expected.to("cpu"), scale, stats)
    except Mismatch as m:
        raise Mismatch("compile", f"{m.message} (against {what})", m.max_abs, m.max_rel) from None
