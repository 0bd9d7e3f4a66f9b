"""The run header: what the run tests with what (backend, isolation, the source of every check,
coverage, modes, expectations), printed by pytest's header hook and kept in run.json."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from conformance.engine import parametric
from conformance.engine.backend import Backend
from conformance.engine.memory import sources
from conformance.engine.sample_run import checks_left_out
from conformance.engine.transfer import RELIES_ON
from conformance.harness.accounts import argument_lines, mode_lines
from conformance.harness.families import registry
from conformance.processes.picture import fork_rule
from conformance.samples.sizes import NOT_SIZED

if TYPE_CHECKING:
    from conformance.harness.plan import Plan
    from conformance.harness.suite import Suite


def header_lines(suite: Suite, plan: Plan | None) -> list[str]:
    """Every header line (also in run.json)."""
    b = suite.backend
    caps = ", ".join(b.capabilities()) or "none"
    files = ", ".join(suite.manifest.files) or "none"
    lines = [
        f"backend {b.module_name} ({b.how_loaded}; device '{b.device_type}', allocator "
        f"{suite.allocator}), torch {torch.__version__}; backend hooks: {caps}"
        + (
            f"; kernels under dispatch key {b.dispatch_key}"
            if b.dispatch_key != "PrivateUse1"
            else ""
        )
        + _wrapped(b),
        *(f"{name} relies on {how}" for name, how in relies_on(suite).items()),
    ]
    if plan is not None:
        lines.append(plan.describe(suite.options.case_timeout))
    lines += [f"device profile: {line}" for line in b.profile.lines()]
    lines += [f"check {name} left out: {why}" for name, why in checks_left_out(b.profile).items()]
    checks = sources(b, b.profile.memory_counter.value)
    checks["fallback path"] = _fallback_source(b)
    checks["seeding"] = _seeding_source(b)
    lines.append("checks: " + "; ".join(f"{k}: {v}" for k, v in checks.items()))
    shard = suite.case_list.shard_line()
    if shard is not None:
        lines.append(shard)
    if suite.case_list.coverage is not None:
        lines += suite.case_list.coverage.header_lines()
    lines += registry().header_lines(suite)
    lines += mode_lines(suite.mode_account())
    lines += argument_lines(suite.arguments)
    lines.append(f"expectations: {files}; results: {suite.options.results or 'off'}")
    return lines


def _wrapped(backend: Backend) -> str:
    """The header's word that the backend's kernels are wrapped (engine/wrapping.py)."""
    if not backend.wrapped_by:
        return ""
    return f"; kernels wrapped by {backend.wrapped_by} (CONFORMANCE_BACKEND_WRAPPER)"


def key_header_lines(suite: Suite, plan: Plan | None) -> list[str]:
    """The header's key lines (backend, isolation, coverage, expectations): shown under -q
    too, the first one again in the summary."""
    b = suite.backend
    lines = [
        f"backend {b.module_name} ({b.how_loaded}; device '{b.device_type}', allocator "
        f"{suite.allocator}), torch {torch.__version__}" + _wrapped(b)
    ]
    if plan is not None:
        lines.append(plan.describe(suite.options.case_timeout))
        p = b.profile
        lines.append(
            f"device probe: {p.usable.how}; forked child: {p.fork_safe.how}; a second process: "
            f"{p.exclusive.how}; {fork_rule()}"
        )
    if not b.profile.storage.value:
        lines.append(STORAGELESS)
    if suite.case_list.coverage is not None:
        lines.append(suite.case_list.coverage.header_lines()[0])
    lines += registry().key_header_lines(suite)
    files = ", ".join(suite.manifest.files) or "none"
    lines.append(f"expectations: {files}; results: {suite.options.results or 'off'}")
    return ["conformance: " + line for line in lines]


#: said once, in the key header lines, for a device whose tensors have no observable storage
STORAGELESS = (
    "storage: not observable on this device (a non-empty tensor's storage has no bytes or no "
    "data pointer: a lazy device); strides, storage offsets, memory around views and aliasing by "
    "pointer are not checked; values, dtype, shape, errors, version counters and in-place, out= "
    "and view write-through (by value) are; layouts: contiguous, zero_size, zero_dim and "
    "transposed, a view made by view ops (narrow, view, permute), never as_strided (its memory "
    "layouts cannot be observed; as_strided views are judged as the op as_strided)"
)


def relies_on(suite: Suite) -> dict[str, str]:
    """What the verdicts rely on besides the op under test (run header, run.json)."""
    below = hasattr(torch._C, "_AutoDispatchBelowADInplaceOrView")
    b = suite.backend
    memory = [h for h in ("check_memory", "live_blocks") if b.hook(h) is not None]
    flushes = suite.manifest.flushes_subnormals
    in_dtype = suite.manifest.computes_in_dtype
    return {
        "reading and placing": RELIES_ON,
        "identity": "torch._C._AutoDispatchBelowADInplaceOrView (the kernel's own return)"
        if below
        else "nothing: this torch lacks _AutoDispatchBelowADInplaceOrView, check skipped",
        "error": "error classes from the message (engine/errorclass.py); layout "
        + (
            "preconditions compared (--strict-errors)"
            if suite.options.strict_errors
            else "preconditions of CPU's kernel: sample not applicable"
        ),
        "random ops": "the same seed before each side (see seeding): equal draws, else properties "
        "(Kolmogorov-Smirnov); where the parameters are known, one draw of "
        f"{parametric.DRAWS} values against them (engine/parametric.py: catches bernoulli p "
        "+-0.02, normal std +-3 %, mean +-0.05 sigma; docs/POWER.md)",
        "last bits": "rounding: by what IEEE 754 asks of the op (engine/ieee.py) where CPU is "
        "measured exact for the (overload, dtype) (engine/exactness.py, cached): CPU's bits or "
        "the correctly rounded float64 result, for +, -, *, /, sqrt also where CPU is 1 ulp off "
        "on some elements; within 1 ulp for functions IEEE only recommends rounding correctly "
        "in float16/bfloat16, the tolerance in float32/float64 (devices document a few ulps); "
        "signed-zero: pointwise ops, conversions and exact non-reductions; subnormal: FTZ/DAZ "
        "from the outputs; "
        + (
            "flushes subnormals as declared: " + ", ".join(sorted(flushes))
            if flushes
            else "no flush of subnormals declared (manifest flushes_subnormals)"
        )
        + "; "
        + (
            "computes in the dtype itself as declared: "
            + ", ".join(sorted(in_dtype))
            + " (values beyond the tolerance judged against the float64 result with the "
            "dtype's own accuracy, engine/precision.py; no rounding check; a note where that "
            "was needed)"
            if in_dtype
            else "half precision computed in float32 as on CPU (manifest computes_in_dtype)"
        ),
        "sizes, arguments, models": "-sizes, -arguments and -models samples judged by CPU's own "
        "error against the call in float64 (engine/evidence.py), not the op's tolerance; "
        + (
            f"-sizes extents: {suite.options.sizes} (samples/sizes.py); not sized: "
            + "; ".join(f"{name} ({why})" for name, why in NOT_SIZED.items())
            if "sizes" in suite.options.values and suite.options.sizes != "none"
            else "no -sizes cases"
        ),
        "blame": "foundation probes (engine/foundations.py) and torch.profiler for the ops a "
        "failed sample reaches",
        "memory": ", ".join(f"backend.{h}" for h in memory) or "nothing (no backend hooks)",
        "storage": "observable (untyped_storage() has bytes and a data pointer): strides, "
        "offsets and memory around views checked"
        if b.profile.storage.value
        else "not observable: values only, read with .cpu() (a lazy device)",
    }


def _fallback_source(b: Backend) -> str:
    if not b.can_route_fallback:
        return "registered overloads run natively only (backend has no set_fallback_routes)"
    proof = (
        "each routed call proven by fallback_counts"
        if b.hook("fallback_counts") is not None
        else "routing not proven (backend has no fallback_counts)"
    )
    keep = (
        "routes set at import kept"
        if b.hook("get_fallback_routes") is not None
        else "routes set at import are cleared by the first routed case (backend has no "
        "get_fallback_routes)"
    )
    return f"registered overloads also routed by set_fallback_routes, {proof}, {keep}"


def _seeding_source(b: Backend) -> str:
    name = f"torch.{b.device_type}"
    lazy = b.lazy
    if lazy is not None and lazy.seed is not None:
        return (
            f"CPU's generator and the lazy runtime's own {lazy.seed_name} ({lazy.name}), which "
            "torch.manual_seed does not reach"
        )
    if b.device_seed_all() is not None:
        return (
            f"CPU's generator and {name}.manual_seed_all, as torch.manual_seed seeds them (the "
            "generators of devices not under test are left alone)"
        )
    return (
        f"torch.manual_seed does not seed the device ({name} lacks manual_seed_all or "
        "_is_in_bad_fork): CPU's generator alone; torch's warning about it is silenced"
    )
