"""-inference cases: in-place, out= and view overloads run on inference tensors inside
`torch.inference_mode()` (no ADInplaceOrView): what they return is what inference shows."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from conformance.engine.modes.base import CaseMode, CaseRequest, ModeScope, register
from conformance.record import CaseId


def inference_context() -> contextlib.AbstractContextManager:
    return torch.inference_mode()


class InferenceMode(CaseMode):
    name = "inference"
    summary = "in-place/out=/view overloads inside torch.inference_mode()"
    case_rank = 3
    account_rank = 1

    def context(self) -> contextlib.AbstractContextManager:
        return inference_context()

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        if not scope.applies.inference_applies(want.overload):
            return []
        return self.contiguous_cases(want, scope)

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        return {"inference": [o for o in tested if scope.applies.inference_applies(o)]}

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        return [
            f"modes: -inference cases for {len(account['inference'])} in-place/out=/view "
            "overloads (contiguous, one dtype)"
        ]


INFERENCE = register(InferenceMode())
