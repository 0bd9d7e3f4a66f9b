"""-grad cases: gradients against CPU (engine/gradients.py) for differentiable functional
overloads and the decompositions the models call."""

from __future__ import annotations

from typing import Any

from conformance.engine import gradients
from conformance.engine.compare import ErrorStats
from conformance.engine.modes.base import CaseMode, CaseRequest, ModeScope, register
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import PlacedCall
from conformance.record import CaseId


class GradMode(CaseMode):
    name = "grad"
    summary = "gradients against CPU (grad_outputs in several layouts, .grad accumulation)"
    max_samples = gradients.MAX_GRAD_SAMPLES
    resize_out = False  # -grad cases place no resized out=
    claims_exactness = False
    blames_any_overload = True  # a backward reaches more than the op's own foundations
    case_rank = 0
    account_rank = 0
    collection_rank = 2  # a backward runs other ops' kernels: after every forward case

    def run_sample(
        self, ctx: RunContext, placed: PlacedCall, outcome: CaseOutcome, first: bool
    ) -> tuple[bool, str | None]:
        gradients.run_grad_sample(
            ctx.op,
            placed,
            ctx.backend.device,
            ctx.spec.tol_scale,
            outcome.stats,
            on_device=lambda: ctx.backend.routed_through_fallback(ctx.route),
            reference=ctx.spec.reference,
        )
        return False, None

    def replay(self, ctx: RunContext, placed: PlacedCall) -> None:
        """Forward and backward: the gradient's ops are evidence too."""
        try:
            gradients.run_grad_sample(
                ctx.op,
                placed,
                ctx.backend.device,
                ctx.spec.tol_scale,
                ErrorStats(),
                on_device=lambda: ctx.backend.routed_through_fallback(ctx.route),
            )
        except Exception:  # noqa: BLE001 - the failure is known; the ops are wanted
            pass

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        if scope.applies.grad_reason(want.overload, want.probe) is not None:
            return []
        allowed = (
            gradients.DECOMPOSITION_GRAD_DTYPES
            if want.overload in scope.grad_only
            else gradients.GRAD_DTYPES
        )
        grad_layouts = [lo for lo in want.layouts if lo in gradients.GRAD_CASE_LAYOUTS]
        return [
            CaseId(want.overload, scope.dtype_name(dtype), lo, p, self.name)
            for dtype in want.dtypes
            if dtype in allowed
            for lo in grad_layouts
            for p in want.paths
        ]

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        by_reason = scope.applies.account(tested + grad_only)
        with_grad = by_reason.pop("", [])
        return {
            "grad": with_grad,
            "grad_only": [o for o in grad_only if o in with_grad],
            "no_grad": by_reason,
        }

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        grad, only = account["grad"], account["grad_only"]
        text = f"modes: -grad cases for {len(grad)} overloads (floating dtypes, layouts "
        text += f"{'/'.join(gradients.GRAD_CASE_LAYOUTS)}; grad_outputs "
        text += f"{'/'.join(gradients.GRAD_OUTPUT_LAYOUTS)})"
        if only:
            text += f", {len(only)} of them decompositions the models call: {', '.join(only)}"
        lines = [text]
        for reason, names in account["no_grad"].items():
            lines.append(f"modes: no -grad cases, {reason}: {len(names)} ({', '.join(names)})")
        return lines


GRAD = register(GradMode())
