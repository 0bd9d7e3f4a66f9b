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

The dynamic-shape part of a case is in `dynamic_shapes.py`. A compiled result that differs from
CPU's eager one but equals Inductor's on CPU is torch's (or the toolchain's) difference, not
the device's: the case gets the `torch-bug` status with both named.

Besides the first ordinary samples, a -compile case runs the first sample of the `special`
value set (NaN, inf, -0.0, subnormals): a compiled kernel built with finite-math assumptions (a
compiler wrapper adding -ffast-math to Inductor's flags, say) is wrong only there.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

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


def sample_sizes(placed: PlacedCall) -> list[tuple[int, ...]]:
    """The sizes of the sample's tensors, in argument order."""
    return [tuple(x.placement.size) for x in placed.leaves if isinstance(x, Leaf)]


def second_size(first: PlacedCall, others: list[PlacedCall]) -> PlacedCall | None:
    """The first of `others` that is `first`'s call at other, non-empty sizes."""
    shape, first_sizes = _call_shape(first), sample_sizes(first)
    if shape is None or not first_sizes or any(0 in s for s in first_sizes):
        return None
    for other in others:
        sizes = sample_sizes(other)
        if _call_shape(other) == shape and sizes != first_sizes:
            if not any(0 in s for s in sizes):
                return other
    return None


def run_compile_sample(
    op: Any,
    placed: PlacedCall,
    device: torch.device | str,
    compiler: str,
    scale: Scale,
    stats: ErrorStats,
    other: torch.device | None = None,
) -> str | None:
    """Compile `op` for one sample on the device and compare. Raises Mismatch (check
    `compile`) or NotApplicable; returns a torch bug (Inductor on CPU gives the device's result,
    not CPU eager's) or None. `other`: compile it there too (another index of the device, while
    `device` is current) and check the outputs' device and values."""
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
        got = compiled_call(op, compiler, dev)
    except Exception as exc:  # noqa: BLE001 - a compile failure is a verdict, unless CPU's too
        problem = f"{type(exc).__name__}: {first_line(exc)}"
        broken = inductor_load_error(torch.device(device).type)
        if broken is not None:  # it breaks every compile in the process, CPU's too
            raise Mismatch(
                "compile", f"the device's Inductor backend fails to load: {broken}"
            ) from None
        try:
            compiled_call(op, compiler, placed.materialize("cpu"))
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
    eager_out = {j: read_back(t) for j, t, _ in returned(op._schema, eager.result)}
    try:
        same_call(op, where, (got, dev), (expected.result, cpu), scale, stats, "cpu")
        for i, out, _ in returned(op._schema, got):
            if i in eager_out:
                name = f"{where}: output {i}"
                same_result(name, out, eager_out[i], scale, stats, "the device's eager")
    except Mismatch as mismatch:
        bug = inductor_on_cpu_agrees(op, compiler, placed.materialize("cpu"), (got, dev), scale)
        if bug is None:
            raise
        return f"{mismatch.message}; {bug}"
    if other is not None:
        _on_other_index(op, compiler, placed, other, device, expected.result, scale, stats)
    return None


#: what a device module hands Inductor (torch._inductor.codegen.common.init_backend_registration)
INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen")


def inductor_load_error(device_type: str) -> str | None:
    """The error of the device module's Inductor classes, where asking for one raises (None
    where they load or the module offers none)."""
    module = getattr(torch, device_type, None)
    for name in INDUCTOR_HOOKS:
        try:
            getattr(module, name, None)
        except Exception as exc:  # noqa: BLE001 - any error of the hook is the finding
            return f"torch.{device_type}.{name}: {type(exc).__name__}: {first_line(exc)}"
    return None


def same_call(
    op: Any,
    where: str,
    actual: tuple[Any, Materialized],
    expected: tuple[Any, Materialized],
    scale: Scale,
    stats: ErrorStats,
    what: str,
) -> None:
    """The outputs and written arguments of one call (result, its arguments) equal another's;
    raises Mismatch (check `compile`)."""
    (got, m), (want, wm) = actual, expected
    same_outputs(op, where, got, want, scale, stats, what)
    for (leaf, _, view), (_, _, wview) in zip(m.bases, wm.bases, strict=True):
        if leaf.written:
            same_result(f"{where}: {leaf.arg} (written)", view, wview, scale, stats, what)


def same_outputs(
    op: Any, where: str, got: Any, want: Any, scale: Scale, stats: ErrorStats, what: str
) -> None:
    """Every output of `want` (a result of `op`) is in `got` and equal; raises Mismatch."""
    outputs = {j: t for j, t, _ in returned(op._schema, got)}
    for i, e, _ in returned(op._schema, want):
        if i not in outputs:
            raise Mismatch("compile", f"{where}: output {i} missing")
        same_result(f"{where}: output {i}", outputs[i], e, scale, stats, what)


def inductor_on_cpu_agrees(
    op: Any, compiler: str, cpu: Materialized, actual: tuple[Any, Materialized], scale: Scale
) -> str | None:
    """Where the device's compiled call differs from CPU eager: the same call compiled on CPU
    (fresh arguments `cpu`). If it gives the device's result, the difference is torch's (its
    decompositions, Inductor, the toolchain), not the device's: returns what to say; else None."""
    try:
        cpu_got = compiled_call(op, compiler, cpu)
        same_call(op, "", actual, (cpu_got, cpu), scale, ErrorStats(), "cpu compiled")
    except Exception:  # noqa: BLE001 - CPU's compiled call differs too, or cannot run: no excuse
        return None
    return (
        f"torch.compile(backend={compiler!r}) on cpu gives the device's result: the difference "
        "is torch's compiled path (or the toolchain), not the device's"
    )


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
        got = compiled_call(op, compiler, placed.materialize(other))
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
            same_result(f"{where}: output {i}", out, e, scale, stats, "cpu")


def compiled_call(op: Any, compiler: str, m: Materialized) -> Any:
    """`op` on the arguments `m` through a fresh `torch.compile` (static shapes, one graph)."""
    return compiled(op, compiler, dynamic=False)(m.args, m.kwargs)


def compiled(op: Any, backend: Any, dynamic: bool | None) -> Callable[[Any, Any], Any]:
    """`fn(args, kwargs)`: `op` under a fresh `torch.compile` (Dynamo's caches reset first: each
    sample would count as a recompile of the last), torch's warnings silenced."""

    def call(args: Any, kwargs: Any) -> Any:
        return op(*args, **kwargs)

    torch._dynamo.reset()
    fn = torch.compile(call, backend=backend, fullgraph=True, dynamic=dynamic)

    def run(args: Any, kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(args, kwargs)

    return run


def same_result(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    scale: Scale,
    stats: ErrorStats,
    what: str,
) -> None:
    """One compiled output equals `expected` (dtype, shape, values); raises Mismatch."""
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
