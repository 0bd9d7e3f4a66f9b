"""Which overloads get -grad, -inference and -sync cases (`--modes`), and why the others do not.

Decided from the schema and the op spec, and for gradients from CPU itself: an overload gets
-grad cases when a few of its float32 samples have an output that requires grad on CPU. The
account is printed in the run header and written to run.json.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from conformance.engine import gradients, oracles
from conformance.engine.discovery import resolve
from conformance.engine.placing import place
from conformance.ops import spec_for

# (overload, dtype, what, compute) -> compute(overload)'s answer about the samples of (overload,
# dtype), perhaps remembered from an earlier run
Remember = Callable[[str, torch.dtype, str, Callable[[str], Any]], Any]
NOT_DIFFERENTIABLE = "not differentiable on cpu (no output of its samples requires grad)"


def _writes(schema: torch._C.FunctionSchema) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


class ModeAccount:
    """Per overload: why it has no -grad cases (None: it has), whether it has -inference ones."""

    def __init__(
        self,
        calls: Callable[[str, torch.dtype], list],
        remember: Remember = lambda overload, dtype, what, compute: compute(overload),
    ) -> None:
        self._calls = calls
        self._remember = remember  # keeps CPU's answer between runs (the Suite's, on disk)
        self._grad: dict[str, str | None] = {}

    def grad_reason(self, overload: str, probe: bool = True) -> str | None:
        """Why `overload` gets no -grad cases (None: it gets them). Without `probe` only the
        schema and spec are asked (no samples are built)."""
        if overload in self._grad:
            return self._grad[overload]
        reason = self._static_grad_reason(overload)
        if reason is None and probe:
            reason = self._remember(overload, torch.float32, "grad", self._cpu_grad_reason)
        if probe or reason is not None:
            self._grad[overload] = reason
        return reason

    def _cpu_grad_reason(self, overload: str) -> str | None:
        """CPU's answer: whether an output of a few float32 samples requires grad."""
        op = resolve(overload)
        try:
            calls = self._calls(overload, torch.float32)
        except Exception as exc:  # noqa: BLE001 - the sample source's failure is a reason
            return f"building its float32 samples failed ({type(exc).__name__})"
        placed = [p for c in calls if (p := place(c, "contiguous", op._schema)) is not None]
        on_cpu = spec_for(overload).reference or op  # an op CPU lacks: its reference
        return None if gradients.differentiable_on_cpu(on_cpu, placed) else NOT_DIFFERENTIABLE

    @staticmethod
    def _static_grad_reason(overload: str) -> str | None:
        spec = spec_for(overload)
        if (spec.reference is not None and not spec.grad_reference) or not spec.check_values:
            return "no comparable values (its op spec)"
        schema = resolve(overload)._schema
        if _writes(schema):
            return "writes its arguments (gradients are compared on the functional overload)"
        if not any("Tensor" in str(a.type) for a in schema.arguments):
            return "no tensor input"
        if not any("Tensor" in str(r.type) for r in schema.returns):
            return "returns no tensor"
        nondeterministic = spec.nondeterministic
        if nondeterministic is None:
            nondeterministic = oracles.is_nondeterministic(resolve(overload))
        if nondeterministic:
            return "draws random numbers"
        return None

    @staticmethod
    def inference_applies(overload: str) -> bool:
        """In-place, out= and view overloads: what they return is what inference mode shows."""
        if not spec_for(overload).check_aliasing:
            return False
        schema = resolve(overload)._schema
        return _writes(schema) or any(r.alias_info is not None for r in schema.returns)

    @staticmethod
    def sync_applies(overload: str) -> bool:
        """Values to compare, on CPU's own op, drawn from no random numbers: what a -sync case
        reads back at each sync point (engine/syncing.py)."""
        spec = spec_for(overload)
        if spec.reference is not None or not spec.check_values:
            return False
        nondeterministic = spec.nondeterministic
        if nondeterministic is None:
            nondeterministic = oracles.is_nondeterministic(resolve(overload))
        return not nondeterministic

    def account(self, overloads: list[str]) -> dict[str, list[str]]:
        """{reason: overloads} for those without -grad cases, and "" for those with."""
        out: dict[str, list[str]] = {}
        for overload in overloads:
            out.setdefault(self.grad_reason(overload) or "", []).append(overload)
        return out
