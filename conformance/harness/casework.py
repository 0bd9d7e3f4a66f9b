"""A case id turned into the engine's outcome: its samples (value set, placements), CPU's
exactness, the route through the fallback and the tolerance rule of its value set. The one
place that does it: the run's verdicts (verdicts.py) and the power tool
(conformance/measure/power.py) both call it, so a power figure measures the check the run
applies to the case the run collects."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

from conformance.engine import errorclass
from conformance.engine.backend import Backend
from conformance.engine.exactness import Exactness
from conformance.engine.modes import mode_of
from conformance.engine.placing import PlacedCall
from conformance.engine.precision import DtypePolicy
from conformance.engine.runner import CaseOutcome, run_case
from conformance.harness.sampling import RunSamples
from conformance.ops import spec_for
from conformance.record import CaseId
from conformance.samples import valuesets

# value sets judged by CPU's own error against float64 per sample (engine/evidence.py): their
# sizes and argument values are not those the ops' tolerances were measured on
EVIDENCE_SETS = ("sizes", "arguments", "models")


class SampleError(Exception):
    """Building the samples of a case failed (the suite's own sources broke)."""


class CpuLacksDtype(SampleError):
    """Building the samples ran a CPU kernel that has no implementation for the case's dtype
    (OpInfo computes some inputs, e.g. a convolution's grad_output, with CPU ops): there is no
    reference to judge the device against, as when CPU lacks the dtype for the op itself."""


def lacks_dtype(exc: BaseException) -> bool:
    """Whether `exc` is CPU's "not implemented for 'Int'" (a dtype without a kernel)."""
    return errorclass.classify(exc).kernel_lacks_dtype


@dataclass
class CaseWork:
    """How the cases of one run are run (collaborators: the backend and the run's samples)."""

    backend: Backend
    samples: RunSamples
    registered: Collection[str]  # overloads with a kernel of the backend (routed on 'fallback')
    strict_errors: bool = False
    # what the manifest declares of the device's arithmetic in a dtype (flush, compute width)
    policy: Callable[[str], DtypePolicy] = lambda _dtype: DtypePolicy()
    smallest_failing: bool = False  # --repro-dir: a failure's repro of its smallest sample

    def placements(self, case: CaseId) -> tuple[list, list[PlacedCall]]:
        """(calls, placed calls) of the case; SampleError when building them fails."""
        dtype, samples = getattr(torch, case.dtype), self.samples
        try:
            mode = mode_of(case.values)
            calls = samples.calls(case.overload, dtype, case.values)
            placed = samples.placed(case.overload, dtype, case.values, case.layout, mode.resize_out)
            placed = mode.prepare(placed, lambda: self._special(case, dtype))
        except Exception as exc:  # noqa: BLE001 - reported as the suite's own error
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            kind = CpuLacksDtype if lacks_dtype(exc) else SampleError
            raise kind(f"{type(exc).__name__}: {text}") from exc
        return calls, placed

    def _special(self, case: CaseId, dtype: torch.dtype) -> list[PlacedCall]:
        """The placed samples of the `special` value set, where the overload gets them."""
        if not valuesets.runs(case.overload, dtype, "special"):
            return []
        return self.samples.placed(case.overload, dtype, "special", case.layout, True)

    def exactness(self, case: CaseId) -> Exactness | None:
        """Whether CPU's result is exact for the case (None: no claim, also where measuring
        it failed: the tolerance stands)."""
        if not mode_of(case.values).claims_exactness:
            return None
        try:
            return self.samples.exactness(case.overload, getattr(torch, case.dtype))
        except Exception:  # noqa: BLE001 - a measurement that cannot run claims nothing
            return None

    def outcome(self, case: CaseId) -> CaseOutcome:
        """Run the case's samples on the device against CPU (SampleError: no samples built)."""
        calls, placed = self.placements(case)
        return run_case(
            self.backend,
            case.overload,
            spec_for(case.overload),
            calls,
            case.layout,
            case.path,
            route=case.path == "fallback" and case.overload in self.registered,
            strict_errors=self.strict_errors,
            mode=mode_of(case.values),
            placements=placed,
            exactness=self.exactness(case),
            policy=self.policy(case.dtype),
            evidence=case.values in EVIDENCE_SETS,
            smallest_failing=self.smallest_failing,
        )
