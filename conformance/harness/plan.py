"""How the cases of this process run (`Plan`: runners forked by a zygote or spawned, in-process)
and what the device probe found, chosen before any case runs and never by touching the device
in this process (the probe runs in a fresh interpreter: `engine/probe.py`; xdist workers get
the controller's probe)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import pytest

from conformance.engine.backend import Backend
from conformance.engine.device_probe import Probe, probe_here, probe_runtime
from conformance.engine.probe import initialised, probe_isolated
from conformance.harness.options import Options
from conformance.harness.roles import Role
from conformance.processes import picture


@dataclass
class Plan:
    """How the cases of this process run, and what the device probe found."""

    mode: str  # "fork", "spawn", "in-process" (xdist worker, --isolate none), "xdist"
    probe: Probe
    reason: str = ""  # why this mode
    # under xdist (the controller's plan): how each worker runs its cases
    runner: str = ""
    runner_cases: int = 0  # cases one runner runs before a fresh one replaces it (0: no limit)
    runners: int = 1  # runners a plain pytest process runs its cases in at the same time

    @property
    def exclusive(self) -> bool:
        """The device is one process's at a time: one device-owning runner at a time."""
        return self.probe.exclusive[0] is True

    def probe_json(self) -> str:
        """The probe, for an xdist worker (it never probes again)."""
        return json.dumps(asdict(self.probe))

    def describe(self, timeout: float) -> str:
        limit = f"{timeout:g} s per case" if timeout else "none"
        if self.mode == "xdist":
            how = _how(self.runner, self.runner_cases, 1)
            text = f"isolation: in pytest-xdist workers, each {how}"
        else:
            text = f"isolation: {_how(self.mode, self.runner_cases, self.runners)}"
        text += f"; time limit: {limit}"
        if self.exclusive:
            text += (
                "; one device-owning runner at a time across the run (the device is one "
                f"process's at a time: {self.probe.exclusive[1]})"
            )
        return text + (f" [{self.reason}]" if self.reason else "")


def _how(mode: str, runner_cases: int, runners: int) -> str:
    """How cases run in one scheduling process, for the run header."""
    if mode == "in-process":
        return "running its cases in-process (a crash or hang ends the run or the worker)"
    process = picture.runner_words(mode)
    reuse = f"{runner_cases} cases" if runner_cases else "any number of cases"
    where = "a runner process" if runners == 1 else f"{runners} runner processes at a time"
    return (
        f"running its cases in {where}, {process}, each reused across cases and replaced "
        f"after a crash, a hang or {reuse} (a crash or hang costs one case; --runners)"
    )


def runners_of(options: Options, plan: Plan) -> int:
    """How many runners a plain pytest process runs its cases in at the same time: --runners,
    or one per usable CPU core up to `AUTO_RUNNERS` where its runners are forked (a spawned
    runner costs an interpreter start and a collection) and the device may be open in several
    processes (else one)."""
    if plan.mode not in ("fork", "spawn") or plan.exclusive:
        return 1
    if options.runners:
        return options.runners
    return max(1, min(AUTO_RUNNERS, usable_cores())) if plan.mode == "fork" else 1


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


#: --runners auto's ceiling: past it the plain pytest process, which logs every case's reports,
#: becomes the bottleneck (pytest-xdist's -n spreads that work too)
AUTO_RUNNERS = 4


def plan_isolation(
    options: Options, backend: Backend, role: Role, given: str | None = None
) -> Plan:
    """Choose how cases run and probe the device, never touching it in this process (a plain
    pytest process, an xdist worker: `given` is the controller's probe). Raises UsageError (one
    line) for an unusable device. The xdist controller makes the same choice its workers make,
    for the run header."""
    isolate = options.isolate
    cases = options.runner_cases
    if role is Role.SPAWNED_RUNNER:
        return _usable(Plan("in-process", probe_here(backend)), backend)
    if role is Role.ZYGOTE:  # never touches the device: its runners got the parent's profile
        return Plan("zygote", Probe(True, "the parent's probe"))
    controller = role is Role.XDIST_CONTROLLER

    def plan(mode: str, probe: Probe, reason: str) -> Plan:
        if controller:
            return Plan("xdist", probe, reason, runner=mode, runner_cases=cases)
        chosen = Plan(mode, probe, reason, runner_cases=cases)
        if role is Role.SINGLE:
            chosen.runners = runners_of(options, chosen)
        return chosen

    def probe_once() -> Probe:
        return Probe(**json.loads(given)) if given else probe_isolated(backend)

    if isolate == "none":
        probe = probe_once() if controller or given else probe_here(backend)
        if probe.usable and not controller and not given:  # the runtime's facts too
            probe.runtime = probe_runtime(backend.device)
        return _usable(plan("in-process", probe, "--isolate none"), backend)
    if isolate == "spawn":
        return _usable(plan("spawn", probe_once(), "--isolate spawn"), backend)
    if initialised(backend):
        reason = (
            f"torch.{backend.device_type}.is_initialized() is True before any case ran: a "
            "forked child could not use the device"
        )
        if isolate == "fork":
            raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
        return _usable(plan("spawn", probe_once(), reason), backend)
    probe = _usable(plan("fork", probe_once(), ""), backend).probe
    forks, how = probe.fork
    if forks:
        return plan("fork", probe, "--isolate fork" if isolate == "fork" else how)
    reason = f"the device refused use in a forked child ({how})" if forks is False else how
    if isolate == "fork":
        raise pytest.UsageError(f"--isolate fork: {reason}; use --isolate auto or spawn")
    return plan("spawn", probe, reason)


def _usable(plan: Plan, backend: Backend) -> Plan:
    if not plan.probe.usable:
        raise pytest.UsageError(
            f"backend '{backend.module_name}' registered device '{backend.device_type}' but it "
            f"is not usable ({plan.probe.error}, probed in a {plan.probe.where}); check the "
            "backend, or pass --device"
        )
    return plan
