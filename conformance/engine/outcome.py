"""What a case measured (`CaseOutcome`) and how its samples run (`RunContext`): the data that the
runner, the modes (engine/modes/) and the harness's verdicts share."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from conformance.engine.backend import Backend
from conformance.engine.compare import ErrorStats, Mismatch
from conformance.engine.exactness import Exactness
from conformance.engine.foundations import Probe
from conformance.engine.placing import PlacedCall
from conformance.engine.precision import DtypePolicy
from conformance.engine.spec import OpSpec


class SampleMode(Protocol):
    """What running a sample needs of the case's mode (engine/modes/base.py `CaseMode`)."""

    name: str
    blames_any_overload: bool

    def context(self) -> contextlib.AbstractContextManager: ...

    def replay(self, ctx: RunContext, placed: PlacedCall) -> None: ...


@dataclass
class CaseOutcome:
    """What a case measured; `failure` is the first failed check, if any."""

    samples: int = 0  # samples compared (values or error parity)
    stats: ErrorStats = field(default_factory=ErrorStats)
    failure: Mismatch | None = None
    failed_sample: str | None = None
    failed_call: PlacedCall | None = None  # for standalone repro scripts
    # --repro-dir: the smallest sample failing the same check, and its failure (the repro's)
    repro_call: PlacedCall | None = None
    repro_failure: Mismatch | None = None
    skip_reason: str | None = None
    unsupported: str | None = None  # the first "not implemented" of the device
    # whether CPU computed a sample the device said "not implemented" for (else CPU raised too)
    unsupported_cpu_computes: bool = False
    not_applicable: str | None = None  # the first sample that says nothing about this case
    torch_bugs: list[str] = field(default_factory=list)  # CPU disagreed with itself
    blocked_by: Probe | None = None  # a broken foundation this failure depends on
    related: Probe | None = None  # a broken foundation it might be related to (not blocking)
    blame_error: str | None = None  # why blame could not be computed (the verdict stands)
    context: RunContext | None = None  # how the samples ran (for blame, after the verdict)
    errors_only: bool = False  # every compared sample raised on CPU (error parity only)
    # a lazy device's own evidence: the ops its runtime counted as fallen back to CPU during
    # the device calls of the case (engine/lazy.py)
    fell_back: set[str] = field(default_factory=set)
    # a lazy device's own time during the case, compiling graphs and running them (its
    # runtime's metrics; None: not measured); the rest of the case's time is the suite's
    compile_seconds: float | None = None
    execute_seconds: float | None = None
    first_call_seconds: float | None = None  # the overload's first device call in this runner
    # what the case's mode records beyond the verdict (-sync: sync points, -compile: graphs)
    evidence: Any = None
    notes: list[str] = field(default_factory=list)  # what passing checks noted


@dataclass(frozen=True)
class RunContext:
    """How to run the samples of one case."""

    backend: Backend
    op: torch._ops.OpOverload
    overload: str
    spec: OpSpec
    route: str | None  # routed through cpu_fallback for the device call
    via_fallback: bool
    strict_errors: bool
    nondeterministic: bool
    mode: SampleMode  # how a sample runs (engine/modes/: the forward call, -grad, ...)
    exactness: Exactness | None = None  # CPU's result is exact: the rounding check applies
    policy: DtypePolicy = DtypePolicy()  # the manifest's declarations for the case's dtype
    evidence: bool = False  # tolerances from CPU's own error per sample (engine/evidence.py)
    notes: list[str] = field(default_factory=list)  # what passing checks noted (the record's)
