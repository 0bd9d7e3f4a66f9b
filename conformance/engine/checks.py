"""The checks applied to one sample: each raises `Mismatch` naming what differs from CPU.

Every check is one function registered with `@sample_check`, in the order they run; `runner.py`
runs each that applies to a `Sample` (when one side raised, only the checks marked `on_error`).
Adding a check is adding one decorated function here, or in the module of its concern
(error_checks.py, alias_checks.py, write_checks.py, bits.py: sample_run.py imports them, which
registers their checks). Two outcomes are not failures: the device raised "not implemented"
(`Unsupported`), or the sample says nothing about this layout or dtype (`NotApplicable`: CPU's
kernel has a layout precondition or lacks the dtype).

Device values are read with `transfer.read_back` (whole storage, one contiguous copy), never
with the backend's strided copies; views are checked on their metadata, never written with a
device op.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import errorclass, oracles
from conformance.engine.backend import Backend
from conformance.engine.compare import (
    ErrorStats,
    Mismatch,
    Scale,
    tolerance,
)
from conformance.engine.exactness import Exactness
from conformance.engine.held_stderr import CASE_WARNINGS, quiet
from conformance.engine.lazy import LazyRuntime
from conformance.engine.placing import Materialized, PlacedCall
from conformance.engine.precision import DtypePolicy, compare_result
from conformance.engine.schema_facts import return_aliases
from conformance.engine.spec import OpSpec
from conformance.engine.transfer import has_storage, read_back, same_tensor


class Unsupported(Mismatch):
    """The device raised "not implemented": never a pass, reported as `unsupported`.
    `cpu_computes`: CPU returned a result for the same sample (the device lacks something CPU
    has: a failure unless the expectations manifest declares it)."""

    def __init__(self, message: str, cpu_computes: bool = True) -> None:
        super().__init__("error", message)
        self.cpu_computes = cpu_computes


class NotApplicable(Exception):
    """Nothing to compare in this sample (CPU's layout precondition, CPU lacks the dtype)."""


#: the tree spec of a single value (a result that is one tensor: most ops')
_LEAF_SPEC = tree_flatten(0)[1]


def flatten(value: Any) -> tuple[list[Any], Any]:
    """`tree_flatten(value)`, without pytree's walk for a single tensor."""
    if isinstance(value, torch.Tensor):
        return [value], _LEAF_SPEC
    return tree_flatten(value)


@dataclass
class Outcome:
    """What one side (CPU or device) returned or raised."""

    result: Any = None
    exc: BaseException | None = None
    _flat: tuple[list[Any], Any] | None = field(default=None, init=False, repr=False, compare=False)

    def flat(self) -> tuple[list[Any], Any]:
        """The result's leaves and tree spec, flattened once: the checks ask for them several
        times a sample (a result is never replaced)."""
        if self._flat is None:
            self._flat = flatten(self.result)
        return self._flat


def invoke(
    fn: Callable[..., Any],
    m: Materialized,
    seeded: bool = False,
    draw: int = 0,
    device: bool = False,
) -> Outcome:
    """Call `fn` on materialised arguments; an exception is the outcome, not raised. `seeded`:
    right after seeding with `SEED + draw` (random ops, `oracles.py`). What a `device` call
    warns is the case's (harness/case_warnings.py records it); CPU's reference calls are
    quiet (torch's own warnings about the reference, not the device): outside a case's
    recording (a bench, a probe) both are."""
    try:
        if device and CASE_WARNINGS.active:  # the recording's filters apply as they are
            return _called(fn, m, seeded, draw)
        with quiet():
            return _called(fn, m, seeded, draw)
    except Exception as exc:  # errors are compared, not raised
        return Outcome(exc=exc.with_traceback(None))


def _called(fn: Callable[..., Any], m: Materialized, seeded: bool, draw: int) -> Outcome:
    if seeded:
        oracles.seed(draw)
    return Outcome(fn(*m.args, **m.kwargs))


def settle(lazy: LazyRuntime, outcome: Outcome) -> Outcome:
    """A lazy device's call run to its end: its pending graph executed at a sync point. An
    error raised there is the call's (the device raised at its sync point, as a user sees it)."""
    try:
        lazy.sync()
    except Exception as exc:  # noqa: BLE001 - the device's error, compared like any other
        return outcome if outcome.exc is not None else Outcome(exc=exc.with_traceback(None))
    return outcome


def version(t: torch.Tensor) -> int:
    """`t._version`, or -1 for an inference tensor (it has no version counter)."""
    return -1 if t.is_inference() else t._version


@dataclass
class Redraw:
    """One further run of a random sample on both sides after seeding with `SEED + k`: (device
    values read back, CPU's) per flattened output and per written argument."""

    outputs: list[tuple[Any, Any]]
    written: list[tuple[torch.Tensor, torch.Tensor]]


#: the scratch key of the (id(device values read back), id(CPU's)) pairs the bit checks found
#: bit for bit the same (bits.differing): `Sample.known_identical`
IDENTICAL = "identical"


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
    route: str | None = None  # the overload routed through cpu_fallback for the device call
    strict_errors: bool = False
    nondeterministic: bool = False  # draws random numbers: values by properties if not equal
    torch_bug: str | None = None  # CPU disagreed with itself across layouts (runner.py)
    # written args whose version moved when CPU ran on contiguous copies (None: not run)
    layout_free_bumps: frozenset[str] | None = None
    redraws: list[Redraw] = field(default_factory=list)  # random ops: further runs (redrawn())
    exactness: Exactness | None = None  # CPU's result is exact (engine/exactness.py)
    policy: DtypePolicy = DtypePolicy()  # the manifest's declarations for the sample's dtype
    scratch: dict[str, Any] = field(default_factory=dict)  # what checks share (read-backs)
    notes: list[str] = field(default_factory=list)  # what a passing check has to say (the case's)

    @property
    def schema(self) -> Any:
        return self.op._schema

    @property
    def raised(self) -> bool:
        return self.expected.exc is not None or self.actual.exc is not None

    def host(self, t: torch.Tensor) -> torch.Tensor:
        """`transfer.read_back(t)`, once per sample: the outputs, written and bit checks, which
        run before any check writes into a device tensor (`view`), share one device->host copy
        of a tensor (the copy is never written: each check computes on its own results)."""
        hosts = self.scratch.setdefault("host", {})
        if id(t) not in hosts:
            storage = bool(self.backend.profile.storage.value)
            hosts[id(t)] = (t, read_back(t, storage))  # t kept alive: its id names it
        return hosts[id(t)][1]

    def known_identical(self, t: torch.Tensor, expected: torch.Tensor) -> bool:
        """Whether the bit checks (bits.differing, before `outputs` and `written`) found device
        tensor `t`'s values, already read back, bit for bit `expected`: nothing left for a
        comparison of values to find (NaNs and the sign of zero included)."""
        same = self.scratch.get(IDENTICAL)
        if not same:
            return False
        held = self.scratch["host"].get(id(t))
        return held is not None and (id(held[1]), id(expected)) in same


@dataclass(frozen=True)
class SampleCheck:
    name: str
    doc: str
    run: Callable[[Sample], None]
    on_error: bool  # runs when either side raised (the others need both results)
    always: bool
    needs: tuple[str, ...] = ()  # facts of the device profile it needs (engine/profile.py)


CHECKS: list[SampleCheck] = []
#: the order checks run in (the first failure is the sample's verdict), whichever module
#: registers them (this one, error_checks.py, alias_checks.py, write_checks.py, bits.py); a check
#: not named runs after these
# fmt: off
ORDER = (
    "path", "error", "identity", "aliasing", "subnormal", "rounding", "outputs",
    "written", "inputs", "view", "write-through", "signed-zero",
)
# fmt: on


def sample_check(
    name: str,
    doc: str,
    *,
    on_error: bool = False,
    always: bool = False,
    needs: tuple[str, ...] = (),
):
    """Register a check, run for every sample in the order of ORDER (a check it does not name
    runs after those, in registration order) on devices whose profile has what it `needs`
    (engine/profile.py NEEDS; the run header names the checks a device's profile leaves out,
    and why)."""

    def register(fn: Callable[[Sample], None]) -> Callable[[Sample], None]:
        check = SampleCheck(name, doc, fn, on_error, always, needs)
        CHECKS.append(check)
        CHECKS.sort(key=lambda c: ORDER.index(c.name) if c.name in ORDER else len(ORDER))
        return fn

    return register


def run_checks(sample: Sample) -> None:
    """Apply every registered check that fits the sample; the first failure raises."""
    profile, raised = sample.backend.profile, sample.raised
    for check in CHECKS:
        if check.needs and profile.missing(check.needs) is not None:
            continue
        if check.always or check.on_error == raised:
            check.run(sample)


first_line = errorclass.first_line


@sample_check(
    "path",
    "the fallback path went through cpu_fallback and the native path did not",
    always=True,
)
def check_path(s: Sample) -> None:
    backend, overload, via_fallback = s.backend, s.overload, s.via_fallback
    before = s.fallback_count_before
    if before is None or (s.expected.exc is not None and s.actual.exc is not None):
        return  # both raised: maybe before any kernel (argument parsing), nothing to route
    after = backend.fallback_count(overload)
    if via_fallback and after == before:
        raise Mismatch(
            "path", f"{overload} did not go through cpu_fallback (fallback_counts did not move)"
        )
    if not via_fallback and after != before:
        raise Mismatch("path", f"the native path of {overload} went through cpu_fallback")


def returned(schema: Any, result: Any) -> list[tuple[int, torch.Tensor, Any]]:
    """(flat index, tensor, alias info of the schema return it belongs to) for each returned
    tensor; the tensors of a list return (`Tensor(a)[]`, e.g. unbind) share that return's info."""
    infos = return_aliases(schema)
    if len(infos) == 1:
        if isinstance(result, torch.Tensor):  # most ops: one tensor, nothing to walk
            return [(0, result, infos[0])]
        values = [result]
    elif isinstance(result, tuple | list) and len(result) == len(infos):
        values = list(result)
    else:
        values = [result]
    found = []
    index = 0
    for info, value in zip(infos, values, strict=False):
        for leaf in flatten(value)[0]:
            if isinstance(leaf, torch.Tensor):
                found.append((index, leaf, info))
            index += 1
    return found


def redrawn(s: Sample, pick: Callable[[Redraw], tuple[Any, Any]]) -> Iterator[oracles.Draws]:
    """The (device, CPU) draws `pick` takes from further runs of the sample, after the seeds
    SEED + 1, SEED + 2, ... (the same on both sides); lazy, and the runs are shared by the
    sample's outputs and written arguments. Stops where CPU raises."""
    for k in itertools.count(1):
        if k > len(s.redraws):
            again = _redraw(s, k)
            if again is None:
                return
            s.redraws.append(again)
        a, e = pick(s.redraws[k - 1])
        if not isinstance(a, torch.Tensor):
            raise Mismatch(
                "shape",
                f"run again after manual_seed({oracles.SEED + k}): returned "
                f"{type(a).__name__}, cpu a tensor",
            )
        yield a, e


def _redraw(s: Sample, k: int) -> Redraw | None:
    """Run the sample again on fresh arguments after seeding with `SEED + k` on both sides
    (None: CPU raised). Device values are read back at once (no device memory is kept)."""
    cpu = s.placed.materialize("cpu")
    dev = s.placed.materialize(s.backend.device)
    expected = invoke(s.spec.reference or s.op, cpu, seeded=True, draw=k)
    if expected.exc is not None:
        return None
    with s.backend.routed_through_fallback(s.route):
        actual = invoke(s.op, dev, seeded=True, draw=k, device=True)
    again = f"run again after manual_seed({oracles.SEED + k})"
    if actual.exc is not None:
        got = errorclass.classify(actual.exc).describe()
        raise Mismatch("error", f"{again}: device raised {got}; cpu returned normally")
    a_leaves, a_spec = actual.flat()
    e_leaves, e_spec = expected.flat()
    if a_spec != e_spec:
        raise Mismatch("shape", f"{again}: returned {a_spec}, cpu returns {e_spec}")
    back = [read_back(a) if isinstance(a, torch.Tensor) else a for a in a_leaves]
    written = zip(
        [view for leaf, _, view in dev.bases if leaf.written],
        [view for leaf, _, view in cpu.bases if leaf.written],
        strict=True,
    )
    return Redraw(list(zip(back, e_leaves, strict=True)), [(read_back(a), e) for a, e in written])


@sample_check("outputs", "returned values, dtype, shape, strides and device match CPU")
def check_outputs(s: Sample) -> None:
    backend, spec, stats = s.backend, s.spec, s.stats
    a_leaves, a_spec = s.actual.flat()
    e_leaves, e_spec = s.expected.flat()
    if a_spec != e_spec:
        raise Mismatch("shape", f"returned {a_spec}, cpu returns {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        name = f"output {i}" if len(a_leaves) > 1 else "output"
        if spec.compared_outputs is not None and i not in spec.compared_outputs:
            continue
        values = spec.check_values and i not in spec.metadata_only_outputs
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch("shape", f"{name}: returned {type(a).__name__}, cpu a tensor")
            if (
                backend.profile.storage.value
                and a.numel()
                and a.layout == torch.strided
                and not has_storage(a)
            ):
                raise Mismatch(
                    "outputs",
                    f"{name}: a non-empty tensor ({a.numel()} elements) without observable "
                    "storage (no bytes or no data pointer) on a device whose tensors have it",
                )
            # where a returned argument may be on another device (_copy_from's dst; on a lazy
            # device: dst wrapped by functionalization)
            device_type = a.device.type
            if device_type != backend.device_type and not any(
                same_tensor(a, view) for _, _, view in s.dev.bases
            ):
                device_type = backend.device_type
            compare_result(
                s,
                name,
                a,
                e,
                device_type=device_type,
                check_strides=spec.check_strides and backend.profile.storage.value,
                check_values=values and not s.nondeterministic,
            )
            if values and s.nondeterministic:
                more = redrawn(s, lambda r, i=i: r.outputs[i])
                oracles.compare_random(name, s.host(a), e, spec.tol_scale, stats, more)
        elif values and not s.nondeterministic:
            _compare_scalar(name, a, e, _sample_dtype(s), spec.tol_scale)


def _sample_dtype(s: Sample) -> torch.dtype | None:
    leaves = s.placed.tensor_leaves()
    return leaves[0].placement.base.dtype if leaves else None


def _compare_scalar(name: str, a: Any, e: Any, dtype: torch.dtype | None, scale: Scale) -> None:
    """Python scalars (`.item()`, ...) of the same type (`3.0` is not `3`, `1` is not `True`),
    within the tolerance of the sample's dtype."""
    if type(a) is not type(e) and isinstance(e, bool | int | float | complex):
        raise Mismatch(
            "dtype",
            f"{name}: device returned {type(a).__name__} {a!r}, cpu {type(e).__name__} {e!r}",
        )
    if a == e or (a != a and e != e):
        return
    if isinstance(e, float | complex) and isinstance(a, float | int | complex):
        rtol, atol = tolerance(dtype or torch.float64, scale)
        if abs(a - e) <= atol + rtol * abs(e):
            return
    raise Mismatch("values", f"{name}: device returned {a!r}, cpu {e!r}")
