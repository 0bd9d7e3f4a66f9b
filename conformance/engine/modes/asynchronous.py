"""-asynchronous cases: an op run as asynchronous code runs it. Each sample is first judged against
CPU as the forward call is; then its inputs are poisoned, and produced again on the default
stream, held busy first (engine/busy.py: the set_delay hook, `_sleep` or calibrated work), by
non_blocking copies from pinned memory; a side stream is made current, waits on an event
recorded behind those copies (wait_event), runs the op, and copies its results non_blocking
into pinned memory, read after an event recorded behind those copies is synchronized. So the op
runs with a non-default stream current, and a missing fence reads poison or stale bytes every
time; the values must equal a synchronous run of the same sample on the device bit for bit. A
failure names the stream, the event and the tensor; a case whose streams were idle at the
fences (a synchronous device) passes with the note "not observable", counted in the summary.

On by default for a bounded subset (contiguous, the first dtype, the native path, two samples)
on a device whose profile has streams and events; a device without them gets none, said once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import busy, checks, sample_run
from conformance.engine.checks import NotApplicable, Outcome
from conformance.engine.compare import Mismatch
from conformance.engine.modes.base import CaseMode, CaseRequest, ModeScope, register
from conformance.engine.outcome import CaseOutcome, RunContext
from conformance.engine.placing import Materialized, PlacedCall
from conformance.engine.poison import POISON, poison_of
from conformance.engine.streams import current_stream, describe, side_stream
from conformance.engine.transfer import read_back
from conformance.record import CaseId

MAX_SAMPLES = 2
DELAY_MS = 2.0  # per delayed piece of work: a few per sample
#: the note of a case whose fences were tested on idle streams (counted in the summary)
NOT_OBSERVABLE = "asynchronous: not observable: "


def _leaves(result: Outcome, dev: Materialized) -> list[Any]:
    """The values a run is judged by: its outputs, then the arguments it writes (views)."""
    return tree_flatten(result.result)[0] + [v for leaf, _, v in dev.bases if leaf.written]


class AsyncMode(CaseMode):
    name = "asynchronous"
    summary = "inputs from a side stream by non_blocking copies, results through pinned memory"
    needs = ("streams", "events")
    max_samples = MAX_SAMPLES
    case_rank = 5
    account_rank = 5

    def run_sample(
        self, ctx: RunContext, placed: PlacedCall, outcome: CaseOutcome, first: bool
    ) -> tuple[bool, str | None]:
        if ctx.nondeterministic:
            raise NotApplicable("draws random numbers: runs differ by design")
        raised, bug = sample_run.run_sample(ctx, placed, outcome.stats, outcome.fell_back)
        if raised or bug:
            return raised, bug
        device = ctx.backend.device
        torch.accelerator.synchronize(0)
        dev = placed.materialize(device)
        with ctx.backend.routed_through_fallback(ctx.route):
            reference = checks.invoke(ctx.op, dev, False)
        if reference.exc is not None:
            return raised, bug
        want = [read_back(x) if isinstance(x, torch.Tensor) else x for x in _leaves(reference, dev)]
        del dev
        compared = sample_run._compared_values(ctx.spec, reference)
        self._pipeline(ctx, placed, want, compared, outcome)
        return raised, bug

    def _pipeline(
        self,
        ctx: RunContext,
        placed: PlacedCall,
        want: list[Any],
        compared,
        outcome: CaseOutcome,
    ) -> None:
        device = ctx.backend.device
        cur, side = current_stream(device), side_stream(device)
        hook = ctx.backend.hook("set_delay")
        hold = busy.LOADER.for_device(device, ctx.backend.device_module, hook)
        # the inputs are produced on the current (default) stream, which is held first; the op
        # and its read-back run on the side stream, made current: a non-default stream
        # device->host copies delayed on every stream: a runtime may run them on a copy engine
        slow = {cur: {"h2d": DELAY_MS}, None: {"d2h": DELAY_MS}}
        with busy.holding(hold, hook, {cur: DELAY_MS}, slow) as holds:
            dev, host = placed.materialize(device), placed.materialize("cpu")
            inputs = []
            for (leaf, base, _), (_, cpu_base, _) in zip(dev.bases, host.bases, strict=True):
                if base.device.type == "cpu" or not base.numel():
                    continue
                cpu_base = cpu_base.reshape(base.shape)  # a contiguous input is its own base
                base.copy_(poison_of(cpu_base))
                inputs.append((leaf.arg, base, cpu_base.pin_memory()))
            side.wait_stream(cur)  # the poison lands before anything on the side stream
            holds.queue(cur, DELAY_MS)
            for _, base, pinned in inputs:
                base.copy_(pinned, non_blocking=True)
            produced = torch.Event(device=device)
            produced.record(cur)
            holds.seen(cur)
            with side:
                ran_on = current_stream(device)
                side.wait_event(produced)
                with ctx.backend.routed_through_fallback(ctx.route):
                    result = checks.invoke(ctx.op, dev, False)
                if result.exc is not None:
                    raise Mismatch(
                        "asynchronous",
                        f"the op raised on {describe(side)} after waiting on the inputs' "
                        f"event, not when run synchronously: {result.exc!r}",
                    )
                leaves = _leaves(result, dev)
                got: list[Any] = []
                for x in leaves:
                    if isinstance(x, torch.Tensor) and x.device.type != "cpu":
                        h = poison_of(torch.empty(x.shape, dtype=x.dtype)).pin_memory()
                        h.copy_(x, non_blocking=True)
                        got.append(h)
                    else:
                        got.append(x)
                done = torch.Event(device=device)
                done.record(side)
            for _, base, _ in inputs:
                base.record_stream(side)
            holds.seen(side)
            done.synchronize()
            got = [g.clone() if isinstance(g, torch.Tensor) else g for g in got]
        why = holds.unobserved()
        if why:
            outcome.notes.append(f"{NOT_OBSERVABLE}{why}")
        difference = sample_run._first_difference(want, got, compared)
        if difference is None:
            return
        if ran_on != side:
            raise Mismatch(
                "asynchronous",
                f"[contract current-stream] the op and its copies were to run on {describe(side)} "
                f"(`with` that stream), but current_stream() there was {describe(ran_on)}; the "
                f"results read after the event recorded on {describe(side)} were not final "
                f"({difference})",
            )
        torch.accelerator.synchronize()
        late = [read_back(x) if isinstance(x, torch.Tensor) else x for x in leaves]
        names = ", ".join(f"'{name}'" for name, _, _ in inputs) or "none"
        where = difference.split(":")[0]
        if sample_run._first_difference(want, late, compared) is None:
            raise Mismatch(
                "asynchronous",
                f"[contract nonblocking-d2h] {where} of the op, copied non_blocking into pinned "
                f"memory on {describe(side)}: the event recorded on {describe(side)} after that "
                f"copy was synchronized, yet the pinned tensor was not final ({difference}; "
                "right after torch.accelerator.synchronize())",
            )
        raise Mismatch(
            "asynchronous",
            f"[contract wait-event] {where} of the op differs from the synchronous run "
            f"({difference}): the op ran on {describe(side)} (current) after wait_event on the "
            f"event recorded on {describe(cur)} behind the non_blocking copies of its inputs "
            f"{names}, and read them before they landed (poison byte {POISON:#x})",
        )

    def case_ids(self, want: CaseRequest, scope: ModeScope) -> list[CaseId]:
        if not self.applies_to(want.overload, scope):
            return []
        return [c for c in self.contiguous_cases(want, scope) if c.path == "native"]

    def applies_to(self, overload: str, scope: ModeScope) -> bool:
        """On a device with streams and events, for overloads with values to compare."""
        if scope.backend.profile.missing(self.needs) is not None:
            return False
        return scope.applies.sync_applies(overload)

    def account(self, tested: list[str], grad_only: list[str], scope: ModeScope) -> dict:
        reason = scope.backend.profile.missing(self.needs)
        return {
            "asynchronous": [o for o in tested if self.applies_to(o, scope)],
            "asynchronous_missing": reason,
            "asynchronous_delays": callable(scope.backend.hook("set_delay")),
        }

    def account_lines(self, account: dict[str, Any]) -> list[str]:
        if account["asynchronous_missing"]:
            return [f"modes: no -asynchronous cases: {account['asynchronous_missing']}"]
        held = (
            "the backend's set_delay hook holds the producing stream and delays the copies"
            if account["asynchronous_delays"]
            else "the producing stream held by the device module's _sleep or calibrated work "
            "(engine/busy.py)"
        )
        return [
            f"modes: -asynchronous cases for {len(account['asynchronous'])} overloads "
            f"(contiguous, one dtype, native path, {MAX_SAMPLES} samples: inputs by non_blocking "
            "copies on the default stream, the op on a side stream made current after "
            f"wait_event, results through pinned memory and an event; {held}; a case whose "
            "streams were idle at the fences says 'not observable')"
        ]


ASYNCHRONOUS = register(AsyncMode())
