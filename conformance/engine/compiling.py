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

Besides the first ordinary samples, a -compile case runs the first sample of the `special`
value set (NaN, inf, -0.0, subnormals): a compiled kernel built with finite-math assumptions (a
compiler wrapper adding -ffast-math to Inductor's flags, say) is wrong only there.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from conformance.engine.checks import Mismatch, NotApplicable, first_line, invoke, returned
from conformance.engine.compare import ErrorStats, Scale, compare_values
from conformance.engine.placing import Materialized, PlacedCall
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
    """The samples a -compile case runs: the first ordinary ones and the first special one."""
    return ordinary[:ORDINARY_SAMPLES] + special[:SPECIAL_SAMPLES]


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
