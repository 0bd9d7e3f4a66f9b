"""The samples of one run's process: built per (overload, dtype, value set) when a case needs
them (a value set from the ordinary calls kept here, not a second build of them), the last
`CALLS_KEPT` kept in memory (the cases of one overload run one after another, and keeping every
overload's would grow with the backend), and what start-up asks about them answered from the
summary on disk (`samples/summary.py`)."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from conformance import samples
from conformance.engine import coverage, exactness, exactness_measure, ieee, oracles
from conformance.engine.calls import Call, content_digest, save_calls
from conformance.engine.discovery import resolve
from conformance.engine.exactness import Exactness
from conformance.engine.operands import data_args
from conformance.engine.placing import PlacedCall
from conformance.engine.runner import placed_calls
from conformance.harness.options import MODES, SIZE_SETS
from conformance.ops import spec_for
from conformance.samples import arguments
from conformance.samples.guarded import forked_call
from conformance.samples.summary import SampleSummary

CALLS_KEPT = 64  # (overload, dtype, value set) whose samples one process keeps in memory
PLACED_KEPT = 32  # (overload, dtype, value set, layout, resize) placements kept (cases of one
# overload, dtype and layout run one after another: the paths and modes share them)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class RunSamples:
    """Samples by (overload, dtype, value set), and remembered answers about them."""

    def __init__(self, cache_dir: str | None, sizes: str = SIZE_SETS[0]) -> None:
        self.cache_dir = cache_dir
        self.sizes = sizes  # the extents of the -sizes cases (--sizes)
        self._calls: OrderedDict[tuple[str, torch.dtype, str], list] = OrderedDict()
        # the value sets' view of the ordinary calls in `_calls` (dropped with them)
        self._ordinary: dict[tuple[str, torch.dtype], samples.Ordinary] = {}
        self._placed: OrderedDict[tuple[Any, ...], list[PlacedCall]] = OrderedDict()
        self._exact: dict[tuple[str, torch.dtype], Exactness | None] = {}
        self._digests: dict[tuple[str, torch.dtype], str] = {}
        self.summary = SampleSummary(cache_dir)
        # overloads reached only through the boxed fallback get fewer samples (set once the
        # run's case list chose them)
        self.fallback_only: frozenset[str] = frozenset()

    def calls(self, overload: str, dtype: torch.dtype, value_set: str = "") -> list:
        """Samples of (overload, dtype, value set), kept while cases use them (the cases of
        one overload share them); the modes (grad, inference, sync) run the ordinary samples."""
        value_set = "" if value_set in MODES else value_set
        key = (overload, dtype, value_set)
        if key in self._calls:
            self._calls.move_to_end(key)
            return self._calls[key]
        ordinary = self._ordinary_of(overload, dtype) if value_set else None
        calls = samples.calls_for(
            overload, dtype, self.cache_dir, value_set, self.limit(overload), self.sizes, ordinary
        )
        self._calls[key] = calls
        if len(self._calls) > CALLS_KEPT:
            gone, _ = self._calls.popitem(last=False)
            if not gone[2]:
                self._ordinary.pop(gone[:2], None)
        return calls

    def _ordinary_of(self, overload: str, dtype: torch.dtype) -> samples.Ordinary:
        """The ordinary calls a value set is built from: the ones this process keeps (its
        ordinary cases run on them), with their digest worked out once for every value set."""
        calls = self.calls(overload, dtype)  # kept or built: `_ordinary` follows `_calls`
        if (overload, dtype) not in self._ordinary:
            self._ordinary[overload, dtype] = samples.Ordinary(calls)
        return self._ordinary[overload, dtype]

    def placed(
        self, overload: str, dtype: torch.dtype, value_set: str, layout: str, resize: bool
    ) -> list[PlacedCall]:
        """The samples of (overload, dtype, value set) placed in `layout`, computed once for
        every case that shares them (native and fallback paths, -inference): the layout-free
        CPU reference is kept on their calls (`Call.layout_free`)."""
        value_set = "" if value_set in MODES else value_set
        key = (overload, dtype, value_set, layout, resize)
        if key in self._placed:
            self._placed.move_to_end(key)
            return self._placed[key]
        schema = resolve(overload)._schema
        calls = self.calls(overload, dtype, value_set)
        found = placed_calls(calls, layout, schema, spec_for(overload).written_args, resize)
        self._placed[key] = found
        if len(self._placed) > PLACED_KEPT:
            self._placed.popitem(last=False)
        return found

    def exactness(self, overload: str, dtype: torch.dtype) -> Exactness | None:
        """Whether CPU's result of (overload, dtype) is exact, and by which rule
        (engine/exactness.py), measured on the dtype's own samples (float64: float32's) once
        and remembered on disk; None where nothing is claimed (values not compared, random ops,
        integer dtypes of ops that are not pointwise)."""
        if (overload, dtype) not in self._exact:
            found = self._exactness(overload, dtype)
            if found is not None:
                found = dataclasses.replace(found, dtype=dtype_name(dtype))
            self._exact[overload, dtype] = found
        return self._exact[overload, dtype]

    def _exactness(self, overload: str, dtype: torch.dtype) -> Exactness | None:
        spec, op = spec_for(overload), resolve(overload)
        kind = ieee.kind(overload)
        if dtype not in exactness.FLOATS + exactness_measure.MEASURED or not spec.check_values:
            return None
        if spec.exact is False or (not dtype.is_floating_point and kind == ieee.EXACT):
            return None  # integer inputs: only pointwise ops give a float result per element
        if spec.nondeterministic or (
            spec.nondeterministic is None and oracles.is_nondeterministic(op)
        ):
            return None
        if spec.exact:
            return Exactness(True, 0, "declared by its op spec (a conversion IEEE defines)")
        data = {i for i, _ in data_args(op._schema)}

        def measured(d: torch.dtype) -> exactness.Measured:
            try:
                calls = self.calls(overload, d)
            except Exception as exc:  # noqa: BLE001 - no samples: no claim
                return exactness.Measured(0, failed=f"no samples ({type(exc).__name__})")
            # by the samples' contents: an op spec's own samples too are measured once
            key = f"{overload}|{dtype_name(d)}|exact|{content_digest(calls)}"
            found = self.summary.remember(
                key, lambda: _measured_apart(overload, calls, d, data), save=True
            )
            return exactness.Measured.from_json(found)

        float32 = measured(torch.float32) if dtype.is_floating_point else None
        own = measured(dtype) if dtype in exactness_measure.MEASURED[1:] else None
        return exactness.judge(kind, own, float32, dtype, overload)

    def arguments(self, overload: str, dtype: torch.dtype, derive: bool = True) -> dict[str, str]:
        """{class label: how it is reached}: "ordinary" (an ordinary sample), "derived" (a call
        of the -arguments case), else why it is left out (samples/arguments.py); remembered.
        Without `derive` (an op spec that takes no -arguments samples) the ordinary samples'
        classes only."""

        def compute(overload: str) -> dict[str, str]:
            try:
                ordinary = self.calls(overload, dtype)
            except Exception as exc:  # noqa: BLE001 - no samples: nothing reached
                reason = f"no samples ({type(exc).__name__})"
                return {c.label: reason for c in arguments.classes(overload)}
            found = arguments.account(overload, ordinary)
            if not derive:
                why = "its op spec takes no -arguments samples (conformance/ops)"
                return {label: how or why for label, how in found.items()}
            for label, made in arguments.derive(overload, dtype, ordinary).items():
                found[label] = "derived" if isinstance(made, Call) else made
            return found

        what = "arguments" if derive else "arguments-ordinary"
        return self.remember(overload, dtype, what, compute)

    def has_reference(self, overload: str, dtype: torch.dtype) -> bool:
        """Whether (overload, dtype) has OpInfo reference inputs unlike its samples (the calls
        of its -reference case), remembered."""

        def count(o: str) -> int:
            try:
                return len(self.calls(o, dtype, "reference"))
            except Exception:  # noqa: BLE001 - no samples: the ordinary cases report how
                return 0

        return bool(self.remember(overload, dtype, "reference", count))

    def limit(self, overload: str) -> int:
        if overload in self.fallback_only:
            return samples.MAX_FALLBACK_SAMPLES
        return samples.MAX_OPINFO_SAMPLES

    def count(self, overload: str, dtype: torch.dtype) -> int:
        """How many ordinary samples (overload, dtype) has (the coverage account), remembered
        between runs; raises coverage.SampleError when building them fails."""

        def count(overload: str) -> int | str:
            try:
                return len(self.calls(overload, dtype))
            except Exception as exc:  # noqa: BLE001 - remembered, reported by the cases
                return coverage.describe_error(exc)

        answer = self.remember(overload, dtype, "count", count)
        if isinstance(answer, str):
            raise coverage.SampleError(answer)
        return answer

    def _digest(self, overload: str, dtype: torch.dtype) -> str:
        """The contents' digest of the ordinary samples of (overload, dtype), once a process."""
        if (overload, dtype) not in self._digests:
            self._digests[overload, dtype] = content_digest(self.calls(overload, dtype))
        return self._digests[overload, dtype]

    def remember(
        self, overload: str, dtype: torch.dtype, what: str, compute: Callable[[str], Any]
    ) -> Any:
        """compute(overload)'s answer about the samples of (overload, dtype), from the summary on
        disk. The key names what selects the samples: dtype and how many are kept; for an op
        spec's own samples (code, which may draw new values each run) also their contents, so
        the same samples are asked once and new ones again (`pytest -k <op>` of a spec'd op
        used to rebuild its -arguments calls on CPU every run)."""
        key = f"{overload}|{dtype_name(dtype)}|{self.limit(overload)}|{what}"
        if spec_for(overload).samples is not None:
            try:
                key += f"|{self._digest(overload, dtype)}"
            except Exception:  # noqa: BLE001 - no samples: compute says so, every time
                return compute(overload)
        return self.summary.remember(key, lambda: compute(overload))


def _measured_apart(overload: str, calls: list, dtype: torch.dtype, data: set[int]) -> list:
    """CPU's exactness of `calls`, measured in a forked child (a CPU kernel crashed on an H200
    host measuring `_linalg_det.result`: in the case runner, that crash failed the device's
    case): a crash there is remembered as "no claim", with how the child ended."""
    fd, path = tempfile.mkstemp(prefix="conformance-exact-", suffix=".pt")
    os.close(fd)
    try:
        save_calls({"": {overload: calls}}, path)
        done, found = forked_call(exactness_measure.measure_saved, (overload, path, dtype, data))
    finally:
        os.unlink(path)
    if done:
        return found
    why = f"CPU's own run crashed while the suite measured it ({found}): a CPU bug, no claim"
    return exactness.Measured(0, failed=why).to_json()
