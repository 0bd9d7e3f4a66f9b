"""-compile cases: torch.compile on the device (its Inductor backend, or aot_eager) against
CPU and eager (engine/compiling.py), then one dynamic graph at a second size
(engine/dynamic_shapes.py). On request only (--modes compile)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.engine import compiling, dynamic_shapes
from conformance.engine.modes.base import CaseMode, CaseRequest, ModeScope, register
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import PlacedCall
from conformance.record import CaseId


class CompileMode(CaseMode):
    name = "compile"
    summary = "torch.compile on the device against CPU and eager, and a dynamic second size"
    max_samples = compiling.MAX_COMPILE_SAMPLES
    compiled = True
    case_rank = 1
    account_rank = 2

    def prepare(self, placed: list[PlacedCall], special: Callable[[], list]) -> list[PlacedCall]:
        """NaN and inf too: where finite-math kernels differ."""
        return compiling.compile_samples(placed, special())

    def run_sample(
        self, ctx: RunContext, placed: PlacedCall, outcome: CaseOutcome, first: bool
    ) -> tuple[bool, str | None]:
        backend = ctx.backend
        bug = compiling.run_compile_sample(
            ctx.op,
            placed,
            backend.device,
            backend.compiler,
            ctx.spec.tol_scale,
            outcome.stats,
            other=backend.other_device if first else None,
        )
        return False, bug

    def after(self, ctx: RunContext, placements: list[PlacedCall], outcome: CaseOutcome) -> None:
        try:
            bug = dynamic_shapes.run_dynamic(
                ctx.op,
                placements,
                ctx.backend.device,
                ctx.backend.compiler,
                ctx.spec.tol_scale,
                outcome.stats,
                outcome.evidence,
            )
            if bug:
                outcome.torch_bugs.append(f"dynamic shapes: {bug}")
        except dynamic_shapes.DynamicMismatch as exc:
            outcome.failure = exc
            outcome.failed_sample, outcome.failed_call = exc.placed.signature(), exc.placed

    def new_evidence(self) -> dynamic_shapes.CompileEvidence:
        return dynamic_shapes.CompileEvidence()

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        if want.overload in scope.grad_only or not want.dtypes or "contiguous" not in want.layouts:
            return []
        if not scope.applies.sync_applies(want.overload):  # values to compare, no random draws
            return []
        return [
            CaseId(want.overload, scope.dtype_name(d), lo, "native", self.name)
            for d in compiling.case_dtypes(want.dtypes)
            for lo in want.layouts
            if lo in compiling.CASE_LAYOUTS
        ]

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        return {
            "compile": [o for o in tested if scope.applies.sync_applies(o)],
            "compiler": scope.backend.compiler,
        }

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        names = ", ".join(str(d).removeprefix("torch.") for d in compiling.CASE_DTYPES)
        return [
            f"modes: -compile cases for {len(account['compile'])} overloads ("
            f"{', '.join(compiling.CASE_LAYOUTS)}; {names} where "
            f"sampled; {compiling.ORDINARY_SAMPLES} samples and {compiling.SPECIAL_SAMPLES} with "
            "NaN/inf; the first also on the last device index where the device module counts "
            f"two; torch.compile backend {account['compiler']!r}"
            + (
                ": the device's Inductor backend)"
                if account["compiler"] == "inductor"
                else ": the device has no Inductor backend, its kernels behind AOTAutograd)"
            )
        ]


COMPILE = register(CompileMode())
