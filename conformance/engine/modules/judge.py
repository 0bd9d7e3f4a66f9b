"""The verdict of one module case: the device's step (engine/modules/step.py) against CPU's,
value by value: every output, every gradient (inputs and parameters) and the module's state after
the step (parameters and buffers); then a `state_dict` round trip (device -> CPU -> a fresh device
module -> CPU, bit for bit).

Tolerances are the op cases' rules for a result of many kernels: the dtype's base tolerance plus
an allowance measured on this sample (engine/evidence.py), `OWN_ERROR` times CPU's own distance
from the same step run in float64 (each value's region of `REGION` neighbours); a float64 case, or
one whose float64 step fails, is judged with `NO_TRUTH_SCALE` times the base. A value outside
that allowance of CPU's passes where it is as close to the float64 truth as CPU's (within the
same allowance): a kernel more accurate than CPU's is no failure; or within the tolerance
torch's own ModuleInfo declares for its CPU/GPU parity test in that dtype (the record notes it).
Integer values and the round trip are exact. Exactness itself is owed per op and judged by the
op cases, not again for a composition. A module that is random in its mode (CPU gives other
values from another seed: dropout in training) is judged by its law where torch defines one
(engine/modules/laws.py: the dropout modules), else in dtype and shape only; the record says
which.

A failing case names the first op that diverged where one can be found (engine/modules/
divergence.py), a diagnostic the harness runs after the verdict, in a child process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.engine.compare import Mismatch
from conformance.engine.measured import NO_TRUTH_SCALE, compare_value
from conformance.engine.modules import laws
from conformance.engine.modules.cases import ModuleCase
from conformance.engine.modules.step import (
    SEED,
    Prepared,
    StepResult,
    build,
    host,
    leaves,
    prepare,
    run_step,
)


class NotComparable(Exception):
    """CPU's own step of the case raises: there is no reference (the case is not applicable)."""


@dataclass
class ModuleVerdict:
    """A case's verdict: `check` names what differed (None: passed), `notes` what the record
    should say besides (random values not compared, no float64 truth)."""

    check: str | None = None
    message: str = ""
    notes: list[str] = field(default_factory=list)
    diverged: str | None = None  # the first op that diverged (divergence.py), if searched

    @property
    def searched(self) -> bool:
        """Whether a search for the op that diverged applies (a value differed)."""
        return self.check in ("output", "grad", "state")


def judge(
    case: ModuleCase, device: torch.device | str, cache_dir: str | None = None
) -> ModuleVerdict:
    """Run the case on CPU and on `device` and compare (errors of the device propagate;
    NotComparable where CPU's own step raises; `cache_dir`: the sample cache its samples are
    kept in, step.seeded_samples)."""
    prepared = prepare(case, cache_dir)
    try:
        cpu, seeds = run_step(prepared, "cpu")
    except Exception as exc:  # noqa: BLE001 - torch's own CPU kernels refuse the sample
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise NotComparable(f"CPU's own step raises {type(exc).__name__}: {first}") from None
    verdict = ModuleVerdict()
    random = _random(prepared, cpu, seeds)
    lawful = random and laws.has_law(prepared.module)
    if random and not lawful:
        verdict.notes.append(
            "random in this mode (CPU gives other values from another seed) and no law for "
            "its draws: dtypes and shapes compared, values not"
        )
    truth = None if random else _truth(prepared, seeds, verdict)
    dev, _ = run_step(prepared, device, seeds)
    try:
        verdict.notes += compare_steps(dev, cpu, truth, not random, prepared.upstream)
        if lawful:
            grads = {"input 0": dev.grads.get("input 0"), "grad_output": seeds[0]}
            x = leaves(prepared.args)[0]
            verdict.notes.append(laws.judge_law(prepared.module, x, dev.outputs[0], grads))
        round_trip(prepared, dev, device)
    except Mismatch as exc:
        verdict.check, verdict.message = exc.check, exc.message
    return verdict


def _random(prepared: Prepared, cpu: StepResult, seeds: list) -> bool:
    again, _ = run_step(prepared, "cpu", seeds, seed=SEED + 1)
    return any(
        isinstance(a, torch.Tensor) and not torch.equal(a, b)
        for a, b in zip(cpu.outputs, again.outputs, strict=True)
        if isinstance(b, torch.Tensor) and a.shape == b.shape and not a.isnan().any()
    )


def _truth(prepared: Prepared, seeds: list, verdict: ModuleVerdict) -> StepResult | None:
    """The step in float64 on CPU (None: the case is float64 already, or the float64 step
    failed: then the base tolerance times NO_TRUTH_SCALE judges, and the record says so)."""
    dtype = prepared.case.torch_dtype
    if not dtype.is_floating_point or dtype == torch.float64:
        return None
    try:
        truth, _ = run_step(prepared, "cpu", seeds, dtype=torch.float64)
    except Exception as exc:  # noqa: BLE001 - no measured allowance: the scale stands
        verdict.notes.append(
            f"no float64 step ({type(exc).__name__}): judged with {NO_TRUTH_SCALE:g}x the base "
            "tolerance"
        )
        return None
    return truth


def compare_steps(
    dev: StepResult,
    cpu: StepResult,
    truth: StepResult | None,
    values: bool = True,
    upstream: tuple[float, float] | None = None,
) -> list[str]:
    """Raise Mismatch (check "output", "grad" or "state") at the first value that differs;
    the notes of values passed only within torch's own tolerance (`upstream`)."""
    compared: list[tuple[str, str, Any, Any, Any]] = []
    for i, (d, c) in enumerate(zip(dev.outputs, cpu.outputs, strict=True)):
        name = f"output {i}" if len(cpu.outputs) > 1 else "output"
        compared.append(("output", name, d, c, truth.outputs[i] if truth else None))
    for name, c in cpu.grads.items():
        d, what = dev.grads.get(name), f"gradient of {name}"
        if (c is None) != (d is None):
            missing = "none" if d is None else "one"
            raise Mismatch("grad", f"{what}: the device gives {missing}, CPU does not")
        compared.append(("grad", what, d, c, truth.grads.get(name) if truth else None))
    for name, c in cpu.state.items():
        t = truth.state.get(name) if truth is not None else None
        compared.append(("state", f"{name} after the step", dev.state.get(name), c, t))
    notes = []
    for check, name, d, c, t in compared:
        if not compare_value(check, name, d, c, t, values, upstream):
            notes.append(
                f"{name}: within torch's own tolerance for this module (rtol, atol "
                f"{upstream}), not the measured one"
            )
    return notes


def round_trip(prepared: Prepared, dev: StepResult, device: torch.device | str) -> None:
    """The device module's state_dict, read to CPU and loaded into a fresh device module, reads
    back bit for bit (Mismatch "state_dict" where it does not)."""
    assert dev.module is not None
    saved = {k: host(v) for k, v in dev.module.state_dict().items()}
    fresh, _, _ = build(prepared, device)
    fresh.load_state_dict(saved)
    for name, value in fresh.state_dict().items():
        back, want = host(value), saved[name]
        same = back.shape == want.shape and back.dtype == want.dtype
        if same and not torch.equal(_bits(back), _bits(want)):  # -0.0, NaN payloads included
            same = False
        if not same:
            raise Mismatch(
                "state_dict",
                f"state_dict round trip: {name} read from the device, loaded into a fresh "
                "device module with load_state_dict, reads back different",
            )


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bytes of `t`'s elements, in order (a copy is owed them all, not equal values)."""
    return t.contiguous().reshape(-1).view(torch.uint8)
