"""-repeat cases (on request: --modes repeat): each sample is judged against CPU as the forward
call is, then run twice more on the device from fresh inputs; a deterministic op must give the
same bits every time. A kernel that reads memory it never wrote (an accumulator left
uninitialised, a tail past the vector loop) or races with itself can match CPU once and still be
wrong: run to run its results differ. One dtype, contiguous, deterministic overloads with values
to compare."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import checks, sample_run
from conformance.engine.checks import NotApplicable, Outcome
from conformance.engine.compare import Mismatch
from conformance.engine.modes.base import CaseMode, CaseRequest, ModeScope, register
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import PlacedCall
from conformance.engine.transfer import read_back
from conformance.record import CaseId

RUNS = 2  # device runs after the judged one
MAX_SAMPLES = 4


def differs(first: list[Any], second: list[Any], compared: Any) -> str | None:
    """Where two device runs of a sample differ (as CPU's two runs are compared)."""
    return sample_run._first_difference(first, second, compared)


class RepeatMode(CaseMode):
    name = "repeat"
    summary = "a deterministic op gives the same bits run after run on the device"
    max_samples = MAX_SAMPLES
    case_rank = 4
    account_rank = 4

    def run_sample(
        self, ctx: RunContext, placed: PlacedCall, outcome: CaseOutcome, first: bool
    ) -> tuple[bool, str | None]:
        if ctx.nondeterministic:
            raise NotApplicable("draws random numbers: runs differ by design")
        raised, bug = sample_run.run_sample(ctx, placed, outcome.stats, outcome.fell_back)
        if raised or bug:
            return raised, bug
        runs = [self._device_values(ctx, placed) for _ in range(RUNS)]
        compared = sample_run._compared_values(ctx.spec, runs[0][1])  # as the checks compare
        difference = differs(runs[0][0], runs[1][0], compared)
        if difference is not None:
            raise Mismatch(
                "repeat",
                f"two runs of the same sample on the device from the same inputs differ "
                f"({difference}): the kernel reads memory it did not write, or races",
            )
        return raised, bug

    @staticmethod
    def _device_values(ctx: RunContext, placed: PlacedCall) -> tuple[list[Any], Outcome]:
        """One device run of the sample: its results and written arguments, read back."""
        dev = placed.materialize(ctx.backend.device)
        with ctx.backend.routed_through_fallback(ctx.route):
            result = checks.invoke(ctx.op, dev, False)
        if result.exc is not None:
            return [type(result.exc).__name__], result
        leaves = tree_flatten(result.result)[0] + [v for leaf, _, v in dev.bases if leaf.written]
        return [read_back(x) if isinstance(x, torch.Tensor) else x for x in leaves], result

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        if not scope.applies.sync_applies(want.overload):  # values to compare, no random draws
            return []
        return self.contiguous_cases(want, scope)

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        return {"repeat": [o for o in tested if scope.applies.sync_applies(o)]}

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        return [
            f"modes: -repeat cases for {len(account['repeat'])} overloads (contiguous, one "
            f"dtype, {MAX_SAMPLES} samples, each run {RUNS} more times on the device: the same "
            "bits every time)"
        ]


REPEAT = register(RepeatMode())
