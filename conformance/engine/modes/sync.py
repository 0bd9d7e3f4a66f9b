"""-sync cases: on a lazy device, results read back at every sync point of its runtime
(engine/syncing.py): mark_step, .cpu(), .item(), save, printing."""

from __future__ import annotations

from typing import Any

from conformance.engine import syncing
from conformance.engine.checks import NotApplicable
from conformance.engine.modes.base import CaseMode, CaseRequest, ModeScope, register
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import PlacedCall
from conformance.record import CaseId

NO_RUNTIME = "modes: no -sync cases: the device has no lazy runtime (torch_xla, torch._lazy)"


class SyncMode(CaseMode):
    name = "sync"
    summary = "results read back at every sync point of a lazy device"
    needs = ("lazy runtime",)
    max_samples = syncing.MAX_SYNC_SAMPLES
    case_rank = 2
    account_rank = 3

    def run_sample(
        self, ctx: RunContext, placed: PlacedCall, outcome: CaseOutcome, first: bool
    ) -> tuple[bool, str | None]:
        backend = ctx.backend
        if backend.lazy is None:
            raise NotApplicable("no lazy runtime: nothing to sync")
        syncing.run_sync_sample(
            backend.lazy,
            ctx.op,
            placed,
            backend.device,
            ctx.spec.tol_scale,
            outcome.stats,
            outcome.evidence,
            on_device=lambda: backend.routed_through_fallback(ctx.route),
        )
        return False, None

    def new_evidence(self) -> syncing.SyncEvidence:
        return syncing.SyncEvidence()

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        if not self.applies_to(want.overload, scope):
            return []
        return self.contiguous_cases(want, scope)

    def applies_to(self, overload: str, scope: ModeScope) -> bool:
        """On a device with a lazy runtime, for overloads with values to compare."""
        if scope.backend.profile.missing(self.needs) is not None:
            return False
        return scope.applies.sync_applies(overload)

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        lazy = scope.backend.lazy
        return {
            "sync": [o for o in tested if self.applies_to(o, scope)],
            "sync_runtime": lazy.describe() if lazy is not None else None,
        }

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        runtime = account["sync_runtime"]
        if not runtime:
            return [NO_RUNTIME]
        return [
            f"modes: -sync cases for {len(account['sync'])} overloads (contiguous, one dtype; "
            f"read back at: {', '.join(syncing.SYNC_POINTS)}; {runtime})"
        ]


SYNC = register(SyncMode())
