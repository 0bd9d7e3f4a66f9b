"""The mutation operators, as plug-ins: a name, what a kernel wrong that way does, which
overloads it can mutate (by schema, never by op), and how its mutant behaves given one call
(`call.py`). Nobody picks operators per op: the campaign crosses every registered overload with
every operator that applies to its schema.

Groups: `values` (results changed after the original kernel ran), `inputs` (the original run on
inputs read wrongly), `semantics` (what the kernel writes, returns, aliases), `runtime` (memory
kept), `registration` (the same mutant at the device's autograd key), and `none`, the identity
(the original through the wrapper: the control, which must change no verdict).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from conformance.measure.mutants import values
from conformance.measure.mutants.call import Call, own_work, set_version, tensors_in, version_of
from conformance.measure.mutants.signature import Signature

Run = Callable[[Call], Any]
#: the device facts of the campaign's control run (comma-separated names, engine/profile.py)
FACTS_VARIABLE = "CONFORMANCE_MUTANT_FACTS"


def device_facts() -> set[str]:
    """The facts the campaign found in the device's profile (none outside a campaign)."""
    return set(filter(None, os.environ.get(FACTS_VARIABLE, "").split(",")))


@dataclass(frozen=True)
class Operator:
    name: str
    group: str
    what: str
    applies: Callable[[Signature], bool]
    run: Run
    key: str = ""  # the dispatch key it registers at ("": the device's backend key)
    # the device profile's facts a check needs to observe it (engine/profile.py): where the
    # run's profile lacks one, a survivor is `unobservable`, as the run header says
    needs: tuple[str, ...] = ()


OPERATORS: dict[str, Operator] = {}


def operator(
    name: str,
    group: str,
    what: str,
    applies: Callable[[Signature], bool],
    key: str = "",
    needs: tuple[str, ...] = (),
) -> Callable[[Run], Run]:
    def register(run: Run) -> Run:
        OPERATORS[name] = Operator(name, group, what, applies, run, key, needs)
        return run

    return register


#: overloads whose result's values are undefined (uninitialised memory): no value is wrong
UNDEFINED_VALUES = ("empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like")


def writes(sig: Signature) -> bool:
    """The overload writes a result (fresh, in place, out=) whose values are defined: a values
    operator can change it."""
    undefined = sig.overload.split(".")[0] in UNDEFINED_VALUES
    return (
        sig.kind in ("functional", "inplace", "out") and sig.category != "runtime" and not undefined
    )


def _values(
    transform: values.Transform,
    why: str,
    when: Callable[[Call, torch.Tensor], bool] = lambda call, t: True,
) -> Run:
    """A mutant that runs the original, then rewrites each output where `when` holds."""

    def run(call: Call) -> Any:
        olds = call.written_contents() if why.startswith("left unwritten") else {}
        result = call.run()
        for t in call.outputs(result):
            if when(call, t):
                values.UNWRITTEN.old = olds.get(id(t))
                try:
                    call.rewrite(t, transform, why)
                finally:
                    values.UNWRITTEN.old = None
        return result

    return run


# ---- values ------------------------------------------------------------------------------------
for _k in (1, 4, 64, 1024):
    operator(f"ulp:{_k}", "values", f"every finite nonzero float result {_k} ulp(s) off", writes)(
        _values(values.ulps(_k), f"{_k} ulp(s) off")
    )
operator("ulp:4/8th", "values", "every 8th float result 4 ulps off", writes)(
    _values(values.ulps(4, every=8), "4 ulps off on every 8th element")
)
operator("sign-small", "values", "the sign of results below 1/32 of the largest flipped", writes)(
    _values(values.sign_of_small(), "sign of small results flipped")
)
operator("nan-to-zero", "values", "NaN results written as 0", writes)(
    _values(values.nan_to_zero, "NaN written as 0")
)
operator("zero-to-nan", "values", "zero results written as NaN", writes)(
    _values(values.zero_to_nan, "0 written as NaN")
)
operator("inf-sign", "values", "the sign of infinite results flipped", writes)(
    _values(values.infinity_sign, "sign of infinities flipped")
)
operator("negzero", "values", "-0.0 results written as +0.0", writes)(
    _values(values.negative_zero, "-0.0 written as +0.0")
)
operator("flush-subnormals", "values", "subnormal results flushed to zero", writes)(
    _values(values.flush_subnormals, "subnormals flushed")
)
operator("int-off", "values", "every 8th integer or boolean result wrong (+1, negated)", writes)(
    _values(values.integers_off(), "integer results off")
)
for _n in (1024, 4096):
    operator(f"past:{_n}:wrong", "values", f"every element past the first {_n} wrong", writes)(
        _values(values.past(_n, "wrong"), f"wrong past {_n}")
    )
    operator(
        f"past:{_n}:unwritten",
        "values",
        f"elements past the first {_n} left unwritten (old contents, or garbage)",
        writes,
    )(_values(values.past(_n, "unwritten"), f"left unwritten past {_n}"))
operator(
    "last:unwritten",
    "values",
    "the last element of each result left unwritten (old contents, or garbage)",
    writes,
)(_values(values.last(1, "unwritten"), "left unwritten: the last element"))
for _dtype in ("float16", "bfloat16", "float64"):
    operator(f"ulp:4@{_dtype}", "values", f"4 ulps off, in {_dtype} results only", writes)(
        _values(
            values.ulps(4),
            f"4 ulps off in {_dtype}",
            when=lambda call, t, d=_dtype: t.dtype == getattr(torch, d),
        )
    )
for _k in (2, 3):
    operator(f"call:{_k}", "values", f"every result wrong on the {_k}th call only", writes)(
        _values(values.off, f"wrong on call {_k}", when=lambda call, t, k=_k: call.index == k)
    )


# ---- inputs ------------------------------------------------------------------------------------
def _strided_read(sig: Signature) -> bool:
    return writes(sig) and bool(sig.read_only)


@operator(
    "strided-as-contiguous",
    "inputs",
    "non-contiguous or expanded inputs read as if contiguous from their first element",
    _strided_read,
)
def _strided_as_contiguous(call: Call) -> Any:
    changed = {}
    for name in call.sig.read_only:
        t = call.bound.get(name)
        if isinstance(t, torch.Tensor) and t.numel() > 1 and not t.is_contiguous():
            fits = (
                t.storage_offset() + t.numel() <= t.untyped_storage().nbytes() // t.element_size()
            )
            if fits:
                with own_work():
                    changed[name] = t.as_strided(t.shape, _contiguous_strides(t.shape))
    if not changed:
        return call.run()
    call.note("strided inputs read as contiguous")
    return call.run(*call.sig.rebuild(call.args, call.kwargs, **changed))


def _contiguous_strides(shape: torch.Size) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return list(reversed(strides))


@operator(
    "generator-ignored",
    "inputs",
    "a random op draws from the default generator, not the one passed",
    lambda sig: sig.has_generator,
)
def _generator_ignored(call: Call) -> Any:
    if call.bound.get("generator") is None:
        return call.run()
    call.note("generator ignored")
    return call.run(*call.sig.rebuild(call.args, call.kwargs, generator=None))


# ---- semantics ---------------------------------------------------------------------------------
@operator(
    "out-ignored",
    "semantics",
    "out= left untouched; the result goes to a new tensor",
    lambda sig: sig.kind == "out" and not sig.tensor_list_out,
)
def _out_ignored(call: Call) -> Any:
    name = call.sig.written[0]
    out = call.bound[name]
    with own_work():
        fresh = torch.empty_like(out)
    call.note("out= ignored")
    return call.run(*call.sig.rebuild(call.args, call.kwargs, **{name: fresh}))


@operator(
    "inplace-into-copy",
    "semantics",
    "an in-place op writes a copy of self and returns it",
    lambda sig: (
        sig.kind == "inplace"
        and not sig.tensor_list_out
        and sig.category not in ("runtime",)
        and "set_" not in sig.overload
    ),
)
def _inplace_into_copy(call: Call) -> Any:
    name = call.sig.written[0]
    copy = call.device_clone(call.bound[name])
    call.note("wrote a copy")
    return call.run(*call.sig.rebuild(call.args, call.kwargs, **{name: copy}))


@operator(
    "input-scribbled",
    "semantics",
    "a read-only input's first element changed",
    lambda sig: bool(sig.read_only) and sig.kind != "view",
)
def _input_scribbled(call: Call) -> Any:
    result = call.run()
    for name in call.sig.read_only:
        for t in tensors_in(call.bound.get(name)):
            if t.numel() > 0 and 0 not in t.stride():  # never an expanded (overlapping) input
                if call.rewrite(t, _first_off, f"input {name} scribbled"):
                    return result
    return result


def _first_off(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1).clone()
    if flat.numel():
        flat[:1] = values.off(flat[:1])
    return flat.reshape(t.shape)


@operator("view-as-copy", "semantics", "a view op returns a copy", lambda sig: sig.kind == "view")
def _view_as_copy(call: Call) -> Any:
    result = call.run()
    if isinstance(result, torch.Tensor):
        call.note("view returned as a copy")
        return call.device_clone(result)
    return result


@operator(
    "copy-as-view",
    "semantics",
    "a functional op writes its result into its first input and returns that input",
    lambda sig: (
        sig.kind == "functional"
        and bool(sig.read_only)
        and sig.read_only[0] == sig.names[0]
        and not sig.tensor_list_out
    ),
)
def _copy_as_view(call: Call) -> Any:
    result = call.run()
    first = call.bound.get(call.sig.names[0])
    fits = (
        isinstance(result, torch.Tensor)
        and isinstance(first, torch.Tensor)
        and first.shape == result.shape
        and first.dtype == result.dtype
        and first.numel() > 0
    )
    if not fits:
        return result
    with own_work(), torch.no_grad():
        first.detach().copy_(result)
    call.note("returned its input")
    return first


@operator(
    "version-not-bumped",
    "semantics",
    "the written tensors' version counters left as they were",
    lambda sig: bool(sig.written),
)
def _version_not_bumped(call: Call) -> Any:
    written = [t for name in call.sig.written for t in tensors_in(call.bound.get(name))]
    before = [version_of(t) for t in written]
    result = call.run()
    for t, version in zip(written, before, strict=True):
        if version is not None and version_of(t) != version:
            set_version(t, version)
            call.note("version counter not bumped")
    return result


_WIDER = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
    torch.int32: torch.int64,
    torch.bool: torch.uint8,
}


def _one_fresh_result(sig: Signature) -> bool:
    return sig.kind == "functional" and not sig.tensor_list_out


@operator("wrong-dtype", "semantics", "a fresh result in a wider dtype", _one_fresh_result)
def _wrong_dtype(call: Call) -> Any:
    result = call.run()
    if isinstance(result, torch.Tensor) and result.dtype in _WIDER:
        call.note("wider dtype")
        with own_work():
            return result.to(_WIDER[result.dtype])
    return result


@operator(
    "wrong-strides",
    "semantics",
    "a fresh result laid out in reversed dimension order",
    _one_fresh_result,
)
def _wrong_strides(call: Call) -> Any:
    result = call.run()
    if not isinstance(result, torch.Tensor) or sum(e > 1 for e in result.shape) < 2:
        return result
    order = list(range(result.dim()))[::-1]
    with own_work():
        relaid = result.permute(order).contiguous().permute(order)
    call.note("strides reversed")
    return relaid


# ---- runtime -----------------------------------------------------------------------------------
KEPT: list[torch.Tensor] = []  # what the leaking mutants keep alive (the leak itself)


def _leak(call: Call, why: str) -> None:
    device = next((t.device for t in call.outputs(None) if t.device.type != "cpu"), None)
    device = device or next(
        (t.device for t in tensors_in(list(call.bound.values())) if t.device.type != "cpu"), None
    )
    if device is not None:
        with own_work():
            KEPT.append(torch.empty(4096, dtype=torch.float32, device=device))
        call.note(why)


@operator(
    "leak-after-first",
    "runtime",
    "16 KiB of device memory kept on every call after the first",
    lambda sig: sig.kind != "other",
    needs=("memory_counter",),
)
def _leak_after_first(call: Call) -> Any:
    result = call.run()
    if call.index > 1:
        _leak(call, "kept 16 KiB")
    return result


@operator(
    "leak-past-size",
    "runtime",
    "16 KiB kept on every call with a result past 1,024 elements",
    writes,
    needs=("memory_counter",),
)
def _leak_past_size(call: Call) -> Any:
    result = call.run()
    if any(t.numel() > 1024 for t in call.outputs(result)):
        _leak(call, "kept 16 KiB")
    return result


@operator(
    "write-past-end",
    "runtime",
    "one element written past the end of the result's memory (the seed bug: a kernel that "
    "overflows its output block)",
    lambda sig: writes(sig) and sig.kind != "view",
    needs=("heap_zones",),
)
def _write_past_end(call: Call) -> Any:
    result = call.run()
    if "heap_zones" not in device_facts():
        return result  # memory the host may not write (a real GPU's): never poked
    for t in call.outputs(result):
        storage = t.untyped_storage()
        if t.device.type == "cpu" or storage.nbytes() == 0:
            continue
        ctypes.memset(storage.data_ptr() + storage.nbytes(), 0x5A, t.element_size())
        call.note("wrote one element past the end")
        break
    return result


# ---- registration ------------------------------------------------------------------------------
operator(
    "autograd-key:off",
    "registration",
    "every result wrong, from a kernel registered at the device's autograd key "
    "(the original autograd kernel called, its gradients kept)",
    lambda sig: writes(sig) and sig.kind != "out",
    key="Autograd",
)(_values(values.off, "wrong at the autograd key"))


# ---- the control -------------------------------------------------------------------------------
@operator("none", "none", "the original kernel through the wrapper (the control)", lambda sig: True)
def _identity(call: Call) -> Any:
    return call.run()
