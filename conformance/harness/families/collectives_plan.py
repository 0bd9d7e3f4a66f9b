"""Which c10d backend on which device the collectives family judges in this run
(`--collectives`), which cases (`--collectives-set`, `--world-sizes`), the time a rank has
(`--collective-timeout`), and the family's run header lines (docs/COLLECTIVES.md)."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.engine.backend import Backend
from conformance.engine.collectives.spec import CollectiveCase, parse_worlds, selection
from conformance.errors import ConformanceUsageError
from conformance.harness.options import Options, choice, option, seconds


def _collectives(text: str) -> str:
    """`auto`, `none`, `BACKEND` or `BACKEND:DEVICE` (checked against torch at load)."""
    value = text.strip() or "auto"
    backend, _, device = value.partition(":")
    if not backend.isidentifier() or (":" in value and not device.isidentifier()):
        raise ConformanceUsageError(
            f"--collectives {text!r}: give auto, none, BACKEND or BACKEND:DEVICE (e.g. gloo:cpu)"
        )
    return value


def _world_sizes(text: str) -> str:
    parse_worlds(text)
    return text


@dataclass(frozen=True)
class CollectivesOptions:
    """The collectives family's own options (Family.options: declared here, read with the
    suite's: `--collectives`, `CONFORMANCE_COLLECTIVES`, ...)."""

    collectives: str = option(
        "the c10d backend the collectives family (conformance/collectives, docs/COLLECTIVES.md) "
        "judges: 'auto' (the one torch.distributed maps the device type to, on the device under "
        "test), 'BACKEND:DEVICE' (e.g. gloo:cpu, echo:npu), 'BACKEND' (on the device under "
        "test) or 'none' (no collectives cases)",
        default="auto",
        parse=_collectives,
    )
    collectives_set: str = option(
        "the collectives cases: core (every collective once: in the default run), default "
        "(every collective x reduce op x dtype at one size, the size sweep and the layouts at "
        "a few dtypes, the other world sizes and async Works on a core set: minutes), full (the "
        "whole product: a nightly), auto (default when the command line names "
        "conformance/collectives, else core)",
        default="auto",
        parse=lambda v: choice("--collectives-set", v, ("auto", "core", "default", "full")),
    )
    world_sizes: str = option(
        "comma-separated world sizes of the collectives cases (rank processes per world)",
        default="2,3,4",
        parse=_world_sizes,
    )
    collective_timeout: float = option(
        "seconds every rank has to answer one collectives case: past it the case is hung, its "
        "world is stopped and the next case starts a new one",
        default="60",
        parse=lambda v: seconds(v, "--collective-timeout"),
    )


@dataclass(frozen=True)
class CollectivesPlan:
    """What the family judges in this run; `missing`: why it judges nothing (cases skipped)."""

    c10d: str | None
    device: str
    backend: str  # how a rank loads the backend (Backend.spec), "" on cpu
    selection: str
    worlds: tuple[int, ...]
    timeout: float
    given: str
    missing: str | None = None

    def cases(self) -> list[CollectiveCase]:
        return [] if self.given == "none" else selection(self.selection, self.worlds)


def collectives_plan(options: Options, b: Backend, own_run: bool) -> CollectivesPlan:
    """The plan from the options and the device profile (`own_run`: the command line names
    conformance/collectives only, so `--collectives-set auto` is the default selection)."""
    import torch.distributed as dist

    own = options.family("collectives", CollectivesOptions)
    given = own.collectives
    chosen = own.collectives_set
    chosen = ("default" if own_run else "core") if chosen == "auto" else chosen
    timeout = own.collective_timeout
    if options.case_timeout:  # a rank's answer comes before the runner's own limit
        timeout = min(timeout, options.case_timeout / 2)
    worlds = parse_worlds(own.world_sizes)
    c10d, _, device = given.partition(":")
    device = device or b.device_type
    missing = None
    if given in ("auto", "none"):
        c10d = b.profile.collectives.value
        if c10d is None and given == "auto":
            missing = (
                f"the device '{b.device_type}' has no c10d backend registered "
                f"({b.profile.collectives.how} has none for it; --collectives BACKEND:DEVICE "
                "names one)"
            )
        elif given == "auto" and b.profile.exclusive.value:  # ranks are processes of their own
            missing = (
                f"the device '{b.device_type}' is one process's at a time, and each rank is a "
                f"process ({b.profile.exclusive.how})"
            )
    elif not dist.is_available():
        raise ConformanceUsageError(f"--collectives {given}: this torch has no torch.distributed")
    elif c10d.lower() not in [n.lower() for n in dist.Backend.backend_list]:
        known = ", ".join(n for n in dist.Backend.backend_list if n != "undefined")
        raise ConformanceUsageError(
            f"--collectives {given}: no c10d backend {c10d!r} is registered (known: {known})"
        )
    elif device not in ("cpu", b.device_type):
        raise ConformanceUsageError(
            f"--collectives {given}: the device must be cpu or the device under test "
            f"'{b.device_type}'"
        )
    # a rank imports the backend module (which may register the c10d backend) unless torch's
    # own backend judges CPU tensors
    spec = "" if device == "cpu" and str(c10d).lower() in ("gloo", "mpi", "ucc") else b.spec
    return CollectivesPlan(c10d, device, spec, chosen, worlds, timeout, given, missing)


def header_lines(plan: CollectivesPlan) -> list[str]:
    """The family's run header lines (also in run.json)."""
    n = len(plan.cases())
    if plan.given == "none":
        return ["collectives: none (--collectives none)"]
    if plan.missing is not None:
        return [f"collectives: none: {plan.missing}: {n} cases not applicable"]
    worlds = ", ".join(str(w) for w in plan.worlds)
    return [
        f"collectives: c10d backend {plan.c10d} on {plan.device} (--collectives {plan.given}), "
        f"selection {plan.selection}: {n} cases, world sizes {worlds}; ranks are fresh "
        f"interpreters, started once per world size; the oracle is plain torch on CPU; a rank "
        f"silent for {plan.timeout:g} s is a hang (--collective-timeout); a refusal is skipped "
        "where torch defines no result or NCCL or gloo refuses it too (docs/COLLECTIVES.md)"
    ]
