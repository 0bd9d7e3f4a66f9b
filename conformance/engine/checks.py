"""The checks applied to one sample: each raises `Mismatch` naming what differs from CPU.

Every check is one function registered with `@sample_check`, in the order they run; `runner.py`
runs each that applies to a `Sample` (when one side raised, only the checks marked `on_error`).
Adding a check is adding one decorated function here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine.backend import Backend
from conformance.engine.compare import ErrorStats, Mismatch, compare_tensor, errors
from conformance.engine.placing import Materialized, PlacedCall
from conformance.ops import OpSpec


@dataclass
class Outcome:
    """What one side (CPU or device) returned or raised."""

    result: Any = None
    exc: BaseException | None = None


@dataclass
class Sample:
    """Everything the checks of one sample may look at."""

    backend: Backend
    op: Any  # torch._ops.OpOverload
    overload: str
    spec: OpSpec
    placed: PlacedCall
    cpu: Materialized
    dev: Materialized
    expected: Outcome
    actual: Outcome
    stats: ErrorStats
    via_fallback: bool
    fallback_count_before: int | None
    written_before: list[tuple[int, int]] = field(default_factory=list)  # (version, data_ptr)
    cpu_written_before: list[tuple[int, int]] = field(default_factory=list)

    @property
    def schema(self) -> Any:
        return self.op._schema

    @property
    def raised(self) -> bool:
        return self.expected.exc is not None or self.actual.exc is not None


@dataclass(frozen=True)
class SampleCheck:
    name: str
    doc: str
    run: Callable[[Sample], None]
    on_error: bool  # runs when either side raised (the others need both results)
    always: bool


CHECKS: list[SampleCheck] = []


def sample_check(name: str, doc: str, *, on_error: bool = False, always: bool = False):
    """Register a check, run for every sample in registration order."""

    def register(fn: Callable[[Sample], None]) -> Callable[[Sample], None]:
        CHECKS.append(SampleCheck(name, doc, fn, on_error, always))
        return fn

    return register


def run_checks(sample: Sample) -> None:
    """Apply every registered check that fits the sample; the first failure raises."""
    for check in CHECKS:
        if check.always or check.on_error == sample.raised:
            check.run(sample)


@sample_check(
    "path",
    "the fallback path went through cpu_fallback and the native path did not",
    always=True,
)
def check_path(s: Sample) -> None:
    backend, overload, via_fallback = s.backend, s.overload, s.via_fallback
    before = s.fallback_count_before
    if before is None:
        return
    after = backend.fallback_count(overload)
    if via_fallback and after == before:
        raise Mismatch(
            "path", f"{overload} did not go through cpu_fallback (fallback_counts did not move)"
        )
    if not via_fallback and after != before:
        raise Mismatch("path", f"the native path of {overload} went through cpu_fallback")


@sample_check("error", "where CPU raises, the device raises alike (and vice versa)", on_error=True)
def check_errors(s: Sample) -> None:
    """Where CPU raised, the device must raise the same exception type (and vice versa)."""
    expected, actual = s.expected, s.actual
    if expected.exc is not None and actual.exc is None:
        raise Mismatch(
            "error",
            f"cpu raised {type(expected.exc).__name__}: "
            f"{first_line(expected.exc)}; the device returned normally",
        )
    if expected.exc is None and actual.exc is not None:
        raise Mismatch(
            "error",
            f"device raised {type(actual.exc).__name__}: "
            f"{first_line(actual.exc)}; cpu returned normally",
        )
    if not isinstance(actual.exc, type(expected.exc)):
        raise Mismatch(
            "error",
            f"device raised {type(actual.exc).__name__} "
            f"({first_line(actual.exc)}), cpu raised "
            f"{type(expected.exc).__name__} ({first_line(expected.exc)})",
        )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


@sample_check(
    "aliasing",
    "in-place/out= return what they wrote, views share storage, functional outputs do not",
)
def check_aliasing(s: Sample) -> None:
    if not s.spec.check_aliasing:
        return
    schema, dev, actual = s.schema, s.dev, s.actual.result
    outs = [t for t in tree_flatten(actual)[0] if isinstance(t, torch.Tensor)]
    infos = _returns(schema)
    written = [view for leaf, _, view in dev.bases if leaf.written]
    inputs = [view for leaf, _, view in dev.bases if not leaf.written]
    for i, t in enumerate(outs):
        info = infos[i] if i < len(infos) else None
        if info is not None and info.is_write:
            if not any(t is w for w in written):
                what = (
                    "out= tensor" if any(leaf.arg == "out" for leaf, _, _ in dev.bases) else "self"
                )
                kind = "out" if what.startswith("out") else "inplace"
                raise Mismatch(kind, f"returned a new tensor instead of the {what} it wrote")
        elif info is not None:
            if t.numel() and not any(_same_storage(t, x) for x in inputs + written):
                raise Mismatch(
                    "view", "view op returned a tensor that does not share storage with its input"
                )
        elif t.numel():
            for x in inputs + written:
                if x.numel() and _same_storage(t, x):
                    raise Mismatch(
                        "aliasing",
                        "output shares storage with input (a functional op must return new memory)",
                    )


@sample_check("outputs", "returned values, dtype, shape, strides and device match CPU")
def check_outputs(s: Sample) -> None:
    backend, spec, stats = s.backend, s.spec, s.stats
    actual, expected = s.actual.result, s.expected.result
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if a_spec != e_spec:
        raise Mismatch("shape", f"returned {a_spec}, cpu returns {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        name = f"output {i}" if len(a_leaves) > 1 else "output"
        if spec.compared_outputs is not None and i not in spec.compared_outputs:
            continue
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch("shape", f"{name}: returned {type(a).__name__}, cpu a tensor")
            compare_tensor(
                name,
                a,
                e,
                device_type=backend.device_type,
                check_strides=spec.check_strides,
                check_values=spec.check_values,
                tol_scale=spec.tol_scale,
                stats=stats,
            )
        elif spec.check_values and a != e and not (a != a and e != e):
            if (
                isinstance(e, float)
                and isinstance(a, float)
                and abs(a - e) <= 1e-5 * max(1.0, abs(e))
            ):
                continue
            raise Mismatch("values", f"{name}: device returned {a!r}, cpu {e!r}")


def _returns(schema) -> list[Any]:
    return [r.alias_info for r in schema.returns]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@sample_check(
    "written",
    "written arguments stay in place, bump their version and equal CPU's, whole buffer included",
)
def check_written(s: Sample) -> None:
    """Written args: memory kept (as on CPU), version bumped, whole buffer equal to CPU's."""
    schema, dev, cpu, spec, stats = s.schema, s.dev, s.cpu, s.spec, s.stats
    before, cpu_before = s.written_before, s.cpu_written_before
    declared = {a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write}
    dev_written = [(leaf, base, view) for leaf, base, view in dev.bases if leaf.written]
    cpu_written = [(leaf, base, view) for leaf, base, view in cpu.bases if leaf.written]
    for (leaf, base, view), (_, cbase, cview), (ver, ptr), (cver, cptr) in zip(
        dev_written, cpu_written, before, cpu_before, strict=True
    ):
        if view.data_ptr() != ptr and cview.data_ptr() == cptr:
            raise Mismatch(
                "inplace", f"{leaf.arg} moved to new memory (data_ptr changed; cpu writes in place)"
            )
        bumped, cpu_bumped = view._version > ver, cview._version > cver
        if leaf.arg in declared and cpu_bumped and not bumped:
            raise Mismatch("inplace", f"version counter of {leaf.arg} not bumped by the write")
        if not spec.check_values:
            continue
        if view.shape != cview.shape:
            raise Mismatch(
                "out",
                f"{leaf.arg}: shape {list(view.shape)} after the call, cpu "
                f"{list(cview.shape)} (resize)",
            )
        compare_tensor(
            leaf.arg,
            view,
            cview,
            device_type=view.device.type,
            check_strides=False,
            check_values=True,
            tol_scale=spec.tol_scale,
            stats=stats,
        )
        _compare_buffer(leaf.arg, base, cbase, spec)


def _compare_buffer(arg: str, base: torch.Tensor, cbase: torch.Tensor, spec: OpSpec) -> None:
    actual = base.cpu()
    if actual.shape != cbase.shape:
        return  # storage was resized (out=): the view comparison covers it
    try:
        compare_tensor(
            f"{arg} buffer",
            actual,
            cbase,
            device_type="cpu",
            check_strides=False,
            check_values=True,
            tol_scale=spec.tol_scale,
            stats=ErrorStats(),
        )
    except Mismatch as m:
        raise Mismatch(
            "inputs",
            f"memory of {arg} outside/around the view differs from cpu "
            f"after the write: {m.message}",
        ) from None


@sample_check("inputs", "arguments the op only reads are left bit-for-bit unchanged")
def check_inputs_untouched(s: Sample) -> None:
    dev = s.dev
    for leaf, base, _ in dev.bases:
        if leaf.written:
            continue
        now = base.cpu()
        pristine = leaf.placement.base
        if now.shape == pristine.shape and not _bitwise_equal(now, pristine):
            _, _, nbad, first = errors(now, pristine)
            raise Mismatch(
                "inputs",
                f"input '{leaf.arg}' was modified ({nbad} elements of its "
                f"buffer changed, first at flat index {first})",
            )


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if torch.equal(a, b):  # the common case, one op (NaN never equals: see below)
        return True
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool((a == b).all())


@sample_check("view", "a write through a returned view lands in the viewed input, as on CPU")
def check_view_writes(s: Sample) -> None:
    """For view ops: a write through the returned view must land in the input, as on CPU."""
    schema, dev, cpu = s.schema, s.dev, s.cpu
    actual, expected = s.actual.result, s.expected.result
    infos = _returns(schema)
    if not infos or infos[0] is None or infos[0].is_write:
        return
    if not isinstance(actual, torch.Tensor) or actual.numel() == 0:
        return
    actual.fill_(3)
    expected.fill_(3)
    for (leaf, base, _), (_, cbase, _) in zip(dev.bases, cpu.bases, strict=True):
        if base.shape == cbase.shape and not _bitwise_equal(base.cpu(), cbase):
            raise Mismatch(
                "view",
                f"a write through the returned view did not reach '{leaf.arg}' as it does on cpu",
            )
