"""How the cases of this process run (`Plan`: forked or spawned runners, in-process) and what
the device probe found, chosen before any case runs and never by initialising the device in a
process that forks runners later (the probe runs in a child: `engine/probe.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from conformance.engine.backend import Backend
from conformance.engine.probe import (
    Probe,
    initialised,
    probe_here,
    probe_in_fork,
    probe_in_fresh_process,
    probe_runtime,
)
from conformance.harness.options import Options
from conformance.harness.roles import Role


@dataclass
class Plan:
    """How the cases of this process run, and what the device probe found."""

    mode: str  # "fork", "spawn", "in-process" (xdist worker, --isolate none), "xdist"
    probe: Probe
    reason: str = ""  # why this mode
    # under xdist (the controller's plan): how each worker runs its cases
    runner: str = ""
    runner_cases: int = 0  # cases one runner runs before a fresh one replaces it (0: no limit)

    def describe(self, timeout: float) -> str:
        limit = f"{timeout:g} s per case" if timeout else "none"
        if self.mode == "xdist":
            how = _how(self.runner, self.runner_cases)
            text = f"isolation: in pytest-xdist workers, each {how}"
        else:
            text = f"isolation: {_how(self.mode, self.runner_cases)}"
        text += f"; time limit: {limit}"
        return text + (f" [{self.reason}]" if self.reason else "")


def _how(mode: str, runner_cases: int) -> str:
    """How cases run in one scheduling process, for the run header."""
    if mode == "in-process":
        return "running its cases in-process (a crash or hang ends the run or the worker)"
    process = "a forked child" if mode == "fork" else "a fresh interpreter (spawned)"
    reuse = f"{runner_cases} cases" if runner_cases else "any number of cases"
    return (
        f"running its cases in a runner process, {process}, reused across cases and replaced "
        f"after a crash, a hang or {reuse} (a crash or hang costs one case)"
    )


def plan_isolation(options: Options, backend: Backend, role: Role) -> Plan:
    """Choose how cases run and probe the device, never initialising it in a process that
    forks case runners later (a plain pytest process, an xdist worker). Raises UsageError (one
    line) for an unusable device. The xdist controller makes the same choice its workers make,
    for the run header."""
    isolate = options.isolate
    cases = options.runner_cases
    if role is Role.SPAWNED_RUNNER:
        return _usable(Plan("in-process", probe_here(backend)), backend)
    controller = role is Role.XDIST_CONTROLLER

    def plan(mode: str, probe: Probe, reason: str) -> Plan:
        if controller:
            return Plan("xdist", probe, reason, runner=mode, runner_cases=cases)
        return Plan(mode, probe, reason, runner_cases=cases)

    if isolate == "none":
        probe = probe_in_fresh_process(backend) if controller else probe_here(backend)
        if probe.usable and not controller:  # the runtime's facts too, as a child learns them
            probe.runtime = probe_runtime(backend.device)
        return _usable(plan("in-process", probe, "--isolate none"), backend)
    if isolate == "spawn":
        return _usable(plan("spawn", probe_in_fresh_process(backend), "--isolate spawn"), backend)
    if initialised(backend):
        reason = (
            f"torch.{backend.device_type}.is_initialized() is True before any case ran: a "
            "forked child could not use the device"
        )
        if isolate == "fork":
            raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
        return _usable(plan("spawn", probe_in_fresh_process(backend), reason), backend)
    probe = probe_in_fork(backend)
    if probe.usable:
        reason = "--isolate fork" if isolate == "fork" else "a forked child can use the device"
        return plan("fork", probe, reason)
    fresh = probe_in_fresh_process(backend)
    if not fresh.usable:
        return _usable(plan("fork", fresh, ""), backend)
    reason = f"the device refused use in a forked child ({probe.error})"
    if isolate == "fork":
        raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
    return plan("spawn", fresh, reason)


def _usable(plan: Plan, backend: Backend) -> Plan:
    if not plan.probe.usable:
        raise pytest.UsageError(
            f"backend '{backend.module_name}' registered device '{backend.device_type}' but it "
            f"is not usable ({plan.probe.error}, probed in a {plan.probe.where}); check the "
            "backend, or pass --device"
        )
    return plan
