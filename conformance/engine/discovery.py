"""Ask the dispatcher which aten overloads the backend registered a kernel for."""

from __future__ import annotations

from collections.abc import Mapping

import torch

DISPATCH_KEY = "PrivateUse1"


def overload_name(qualified: str) -> str:
    """'aten::add.Tensor' -> 'add.Tensor'; 'aten::abs' -> 'abs'."""
    return qualified.split("::", 1)[-1]


def resolve(overload: str) -> torch._ops.OpOverload:
    """The OpOverload object for 'add.Tensor' / 'abs'."""
    name, _, ov = overload.partition(".")
    packet = getattr(torch.ops.aten, name)
    return getattr(packet, ov or "default")


def aten_registrations(key: str) -> list[str]:
    """The aten overloads with a kernel registered at `key` (`add.Tensor`, `abs`), by the
    dispatcher's own walk (Dispatcher::getRegistrationsForDispatchKey: the ops that
    hasKernelForDispatchKey); none for no key (the walk would name every op). Raises
    RuntimeError for a key this torch does not have."""
    if not key:
        return []
    names = torch._C._dispatch_get_registrations_for_dispatch_key(key)
    return [overload_name(q) for q in names if q.startswith("aten::")]


def _direct_registrations(dispatch_key: str) -> list[str]:
    return sorted(set(aten_registrations(dispatch_key)))


def has_schema(overload: str) -> bool:
    """Whether the dispatcher knows this overload's schema (a backend can register a kernel for
    a name that has none, e.g. `isfinite.out`, or `eq`/`floordiv`, which exist only as
    TorchScript operators that `torch.ops.aten` resolves but the dispatcher never reaches: such a
    kernel is unreachable)."""
    name, _, ov = overload.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{name}", ov)
        resolve(overload)
    except (AttributeError, RuntimeError):
        return False
    return True


def registered_overloads(dispatch_key: str = DISPATCH_KEY) -> list[str]:
    """Sorted aten overloads with a direct kernel for the dispatch key and an aten schema."""
    return [o for o in _direct_registrations(dispatch_key) if has_schema(o)]


def autograd_key(dispatch_key: str = DISPATCH_KEY) -> str | None:
    """The autograd key of a backend key (`PrivateUse1` -> `AutogradPrivateUse1`, `XLA` ->
    `AutogradXLA`), None where torch has none: a kernel there runs for every tensor of the
    device, whether it requires grad or not, before the backend key's."""
    key = f"Autograd{dispatch_key}"
    return key if hasattr(torch._C.DispatchKey, key) else None


def registrations_by_key(dispatch_key: str = DISPATCH_KEY) -> dict[str, list[str]]:
    """{key: the overloads with a kernel there} for the backend key and its autograd key (the
    autocast key's kernels are the autocast family's: engine/autocast/registrations.py)."""
    keys = [dispatch_key, *filter(None, [autograd_key(dispatch_key)])]
    return {key: registered_overloads(key) for key in keys}


def case_overloads(by_key: Mapping[str, list[str]]) -> list[str]:
    """Every overload of `registrations_by_key`'s answer, whatever its key: each is an op case
    (a vendor's dropout or lstm at the autograd key included)."""
    return sorted({o for names in by_key.values() for o in names})


def schemaless_registrations(dispatch_key: str = DISPATCH_KEY) -> list[str]:
    """Kernels registered for aten names that have no schema (never callable, never tested)."""
    return [o for o in _direct_registrations(dispatch_key) if not has_schema(o)]


def has_backend_fallback(dispatch_key: str = DISPATCH_KEY) -> bool:
    """True when the backend registered a boxed fallback (e.g. cpu_fallback)."""
    key = getattr(torch._C.DispatchKey, dispatch_key)
    return bool(torch._C._dispatch_has_backend_fallback(key))


def how_reached(overload: str, dispatch_key: str = DISPATCH_KEY) -> str:
    """'kernel', 'default backend kernel', 'backend fallback' or 'none' for one overload."""
    table = torch._C._dispatch_dump_table("aten::" + overload)
    for line in table.splitlines():
        if line.startswith(dispatch_key + ":"):
            return line.rsplit("[", 1)[-1].rstrip("]")
    return "none"


FALLBACK = "backend fallback"
DEFAULT_KERNEL = "default backend kernel"  # torch's CompositeExplicitAutograd(NonFunctional)


def fallback_overloads(
    known_bases: set[str],
    dispatch_key: str = DISPATCH_KEY,
    kinds: tuple[str, ...] = (FALLBACK,),
    prefixes: bool = False,
) -> list[str]:
    """Aten overloads the backend handles only through its boxed fallback (or, with `kinds`,
    through torch's default kernel: `DEFAULT_KERNEL`), limited to ops whose base name is in
    `known_bases` (those we have samples for); with `prefixes`, also those whose samples come
    from a shorter name (`nll_loss_forward` from `nll_loss`'s, as the sample sources find them)."""
    out = set()
    # only the fallback wanted: an overload with a kernel the key runs before its fallback is
    # never routed there, so the dump of its table (most of the cost: a coverage account in
    # every run) is skipped
    ruled_out = _kernels_at(_before_fallback(dispatch_key)) if kinds == (FALLBACK,) else set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name[len("aten::") :]
        overload = f"{name}.{schema.overload_name}" if schema.overload_name else name
        if (
            _known(name.strip("_"), known_bases, prefixes)
            and overload not in ruled_out
            and how_reached(overload, dispatch_key) in kinds
        ):
            out.add(overload)
    return sorted(out)


#: the alias keys whose kernel a backend key may run before its boxed fallback, in the
#: dispatcher's order (OperatorEntry::computeDispatchTableEntryWithDebug)
COMPOSITE_KEYS = (
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
    "CompositeImplicitAutograd",
)


def _before_fallback(dispatch_key: str) -> tuple[str, ...]:
    """The keys whose kernel `dispatch_key` always runs rather than its boxed fallback: its own,
    and each composite alias that covers it (XLA, Lazy and the sparse keys are not covered by
    CompositeExplicitAutogradNonFunctional: its kernels reach their fallback); the implicit
    one only where the explicit one covers the key too (the dispatcher skips an implicit kernel
    where an explicit one exists but does not apply). Only the key's own where this torch
    cannot say (no pre-filter but that)."""
    try:
        covers = [
            a for a in COMPOSITE_KEYS if torch._C._dispatch_is_included_in_alias(dispatch_key, a)
        ]
    except (AttributeError, RuntimeError, TypeError):
        return (dispatch_key,)
    if "CompositeExplicitAutograd" not in covers:
        covers = [a for a in covers if a != "CompositeImplicitAutograd"]
    return (dispatch_key, *covers)


def _kernels_at(keys: tuple[str, ...]) -> set[str]:
    """The aten overloads with a kernel registered at any of `keys`."""
    return {o for key in keys for o in _registrations(key)}


def _registrations(key: str) -> list[str]:
    try:
        return aten_registrations(key)
    except RuntimeError:  # a key this torch does not have
        return []


def _known(base: str, known_bases: set[str], prefixes: bool) -> bool:
    if base in known_bases:
        return True
    parts = base.split("_")
    return prefixes and any("_".join(parts[:n]) in known_bases for n in range(1, len(parts)))
