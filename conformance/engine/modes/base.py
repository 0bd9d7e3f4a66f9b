"""The protocol of an execution mode, and the registry the modes of this package join.

A mode is one module of `engine/modes/` holding one `CaseMode` subclass instance passed to
`register`. It says which cases it applies to (`case_ids`, from the overload's dtypes, paths and
layouts and what the run's `ModeScope` answers), what it needs of the device profile (`needs`,
engine/profile.py NEEDS: a device without it gets no cases, for the reason the profile gives),
how it runs a sample (`run_sample`, inside `context`), what else it checks once the samples
passed (`after`), what evidence it records (`new_evidence`: an object with `as_record()`), how
its repro differs (`compiled`), and its account (`account`, `account_lines`: run header and
run.json). The plain forward call is the mode named "" (`plain.py`), the default of every case
whose id ends in no mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from conformance.engine import checks, sample_run
from conformance.engine.backend import Backend
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import PlacedCall
from conformance.engine.spec import OpSpec
from conformance.record import CaseId


class Applies(Protocol):
    """The run's answers about an overload (harness/modes.py `ModeAccount`, remembered on disk)."""

    def grad_reason(self, overload: str, probe: bool = True) -> str | None: ...

    def inference_applies(self, overload: str) -> bool: ...

    def sync_applies(self, overload: str) -> bool: ...

    def account(self, overloads: list[str]) -> dict[str, list[str]]: ...


@dataclass(frozen=True)
class CaseRequest:
    """The cases of one overload a mode is asked for: its dtypes with samples, the paths and
    layouts the run selected (`probe`: CPU may be asked, else the schema and spec alone)."""

    overload: str
    dtypes: list[torch.dtype]
    paths: list[str]
    layouts: list[str]
    probe: bool = True


@dataclass(frozen=True)
class ModeScope:
    """What a mode asks of the run to choose its cases and write its account."""

    backend: Backend
    applies: Applies
    grad_only: Collection[str]  # overloads with -grad cases only (the models' decompositions)
    dtype_name: Callable[[torch.dtype], str]


class CaseMode:
    """The plain forward call; every mode overrides what it does differently."""

    name = ""  # the case id's last part (-grad); "" for the forward call
    summary = "the forward call"
    needs: tuple[str, ...] = ()  # facts of the device profile (engine/profile.py NEEDS)
    max_samples: int | None = None  # samples per case
    resize_out = True  # also an out= resized from empty (contiguous layout)
    claims_exactness = True  # CPU's measured exactness applies (the rounding check)
    blames_any_overload = False  # blame may name any foundation (a backward runs many ops)
    compiled = False  # the repro runs torch.compile (its environment, the compiler)
    case_rank = 0  # position among the modes' cases of one overload
    account_rank = 0  # position in the mode account (run header, run.json)
    collection_rank = 1  # items: foundations 0, forward cases 1, -grad 2, scenarios 3

    def context(self) -> contextlib.AbstractContextManager:
        """What a sample is built and run inside."""
        return contextlib.nullcontext()

    def prepare(self, placed: list[PlacedCall], special: Callable[[], list]) -> list[PlacedCall]:
        """The placed samples of a case (`special`: the -special set's, on demand)."""
        return placed

    def run_sample(
        self, ctx: RunContext, placed: PlacedCall, outcome: CaseOutcome, first: bool
    ) -> tuple[bool, str | None]:
        """Run and check one sample: (whether a side raised, CPU's inconsistency or None)."""
        return sample_run.run_sample(ctx, placed, outcome.stats, outcome.fell_back)

    def after(self, ctx: RunContext, placements: list[PlacedCall], outcome: CaseOutcome) -> None:
        """Checks once every sample passed (sets outcome.failure)."""

    def new_evidence(self) -> Any:
        """What the mode records beyond the verdict (an object with `as_record()`), or None."""
        return None

    def replay(self, ctx: RunContext, placed: PlacedCall) -> None:
        """The device call of a failed sample again, for the profiler (blame's evidence)."""
        dev = placed.materialize(ctx.backend.device)
        with ctx.backend.routed_through_fallback(ctx.route), self.context():
            checks.invoke(ctx.op, dev, seeded=ctx.nondeterministic)

    # ---- which cases, and the account -----------------------------------------------------
    def applies(self, overload: str, spec: OpSpec, scope: ModeScope) -> bool:
        return True

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        """The cases of this mode for one overload."""
        return []

    def contiguous_cases(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        """One case per path in the first dtype, contiguous (none for a grad-only overload)."""
        if want.overload in scope.grad_only or not want.dtypes or "contiguous" not in want.layouts:
            return []
        name = scope.dtype_name(want.dtypes[0])
        return [CaseId(want.overload, name, "contiguous", p, self.name) for p in want.paths]

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        """This mode's entries of the mode account (run.json "modes")."""
        return {}

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        """Its run header lines, from the account."""
        return []


#: name -> mode; filled by the modules of this package at import (engine/modes/__init__.py)
REGISTRY: dict[str, CaseMode] = {}


def register(mode: CaseMode) -> CaseMode:
    if mode.name in REGISTRY:
        raise ValueError(f"two modes named {mode.name!r}")
    REGISTRY[mode.name] = mode
    return mode
