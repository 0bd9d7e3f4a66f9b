"""Busy streams on any device: what makes a missing fence observable.

An ordering check (the contract's fences, the -asynchronous mode) is only worth something if the
work it fences is still running when the fence is tested. So the suite queues a *hold* on the
producer's stream first, and the producer queues behind it. How a hold is made is chosen once per
process and device (`Loader.for_device`), in this order:

- `hook`: the backend's optional `set_delay` hook (docs/BACKEND_PROTOCOL.md): the held streams'
  kernels sleep the hold's milliseconds each for the block, and one small kernel is the hold
  (deterministic);
- `_sleep`: the device module's `_sleep(cycles)` (`torch.cuda._sleep`, and where other devices
  have one), calibrated with timing events: cycles per millisecond measured on the device;
- `work`: standard ops (multiplies and adds of tensors on 4 MiB, then 64 MiB, then 1024 x 1024
  matmuls), the first whose queued work keeps `query()` False after the host returns and takes
  the device longer than the host's launch, as many as the measured device time per op needs
  for the hold's milliseconds.

A device where none of them leaves `query()` False after the call returns (a synchronous device,
a `_sleep` that returns at once) cannot make a fence observable. Each check proves the stream
busy just before it tests the fence (`Holds.seen`); what it could not see is said ("not
observable: ...") in its record and counted in the run's summary, never a plain pass.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.engine.streams import busy, describe
from conformance.engine.streams import delays as set_delays

#: the most ops one calibrated hold queues (a device that keeps up with the host needs more)
MAX_OPS = 4096

SLEEP_TIMINGS = 3  # timed runs of _sleep; the fastest rate is kept


@dataclass
class Hold:
    """How this process holds a stream of one device: `how` is "hook", "_sleep", "work" or ""
    (none observable: `why` says why)."""

    how: str
    what: str  # for the header and records: e.g. "60 x mul_ on 4 MiB (~63 ms measured)"
    why: str = ""
    launch: Callable[[float], None] | None = None  # queues a hold of ~ms on the current stream
    ever_busy: bool = False  # a stream it held was seen busy in this process: asynchronous

    def queue(self, stream: torch.Stream, ms: float) -> None:
        """Queue a hold of about `ms` on `stream` (made current for the launch)."""
        if self.launch is None:
            return
        with stream:
            self.launch(ms)

    def floor_ms(self, ms: float) -> float:
        """The least time a hold of `ms` surely takes on the device (0: not known: calibrated
        work on a shared machine varies)."""
        return {"hook": 0.8 * ms, "_sleep": 0.5 * ms}.get(self.how, 0.0)


@dataclass
class Holds:
    """The holds of one check: which streams it held and whether each was seen busy at its
    fence."""

    hold: Hold
    missed: list[str] = field(default_factory=list)  # fences tested on an idle stream

    def queue(self, stream: torch.Stream, ms: float) -> None:
        """Hold `stream` once more (between two events of a timing check)."""
        self.hold.queue(stream, ms)

    def seen(self, stream: torch.Stream) -> bool:
        """Whether `stream` is busy now (call it just before testing a fence on its work)."""
        if busy(stream):
            self.hold.ever_busy = True
            return True
        self.missed.append(describe(stream))
        return False

    def unobserved(self) -> tuple[list[str], str] | None:
        """(the streams, why) of fences tested on idle streams, or None when each was busy."""
        if not self.missed:
            return None
        streams = list(dict.fromkeys(self.missed))
        if self.hold.how == "":
            return streams, f"never busy at the fence: {self.hold.why}"
        if not self.hold.ever_busy:
            return streams, (
                f"idle at every fence although held by {self.hold.what}: no held stream was seen "
                "busy in this process (synchronous)"
            )
        return streams, (
            f"not busy when the fence was tested although held by {self.hold.what} (the hold "
            "did not keep it busy: the work ran on another stream, or finished first)"
        )


def said(unobserved: dict[str, list[str]]) -> str:
    """What checks could not observe, as one text: 'streams: why; ...'."""
    return "; ".join(
        f"{', '.join(streams)}: {why}" if streams else why for why, streams in unobserved.items()
    )


class Loader:
    """Chooses and calibrates the hold of each device, once per process."""

    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}

    def for_device(self, device: torch.device, module: Any, hook: Any) -> Hold:
        key = str(device)
        if key not in self._holds:
            self._holds[key] = choose(device, module, hook)
        return self._holds[key]


#: this process's holds (a runner measures each device once)
LOADER = Loader()


def choose(device: torch.device, module: Any, hook: Any) -> Hold:
    """The hold of `device`: the hook, else a calibrated `_sleep`, else calibrated work."""
    if hook is not None:
        return Hold(
            "hook",
            "the backend's set_delay hook (the held streams' kernels sleep)",
            launch=lambda ms: _tiny(device),
        )
    sleep = getattr(module, "_sleep", None)
    reasons = []
    if callable(sleep):
        hold = _calibrate_sleep(device, sleep, getattr(module, "__name__", "the device module"))
        if hold.how:
            return hold
        reasons.append(hold.why)
    hold = _calibrate_work(device)
    if not hold.how and reasons:
        hold.why = "; ".join([*reasons, hold.why])
    return hold


def _tiny(device: torch.device) -> None:
    a = torch.ones(8, device=device)
    a.mul_(a)


def _calibrate_sleep(device: torch.device, sleep: Callable[[int], None], name: str) -> Hold:
    """`_sleep(cycles)` timed with events on the current stream: cycles per millisecond. One
    untimed launch first (a first launch loads its kernel: CUDA's lazy module loading held an
    H200's stream 9 ms before 1e6 cycles ran, and a rate taken from it made every hold 18 times
    shorter than asked); then the fastest of `SLEEP_TIMINGS` timed runs of at least 5 ms (a GPU
    raises its clock under load: the fastest rate gives holds at least as long as asked)."""
    try:
        start, end = (torch.Event(device=device, enable_timing=True) for _ in range(2))
        stream = torch.accelerator.current_stream(device.index or 0)
        sleep(1000)
        torch.accelerator.synchronize()
        cycles, rates, pending = 1_000_000, [], False
        while len(rates) < SLEEP_TIMINGS:
            torch.accelerator.synchronize()
            start.record(stream)
            sleep(cycles)
            end.record(stream)
            pending = pending or not end.query()
            end.synchronize()
            ms = start.elapsed_time(end)
            if ms >= 5.0 or cycles >= 10**10:
                rates.append(cycles / ms if ms > 0.01 else 0.0)
            else:
                cycles *= 10
    except Exception as exc:  # noqa: BLE001 - a _sleep or timing events the device lacks
        return Hold("", "", why=f"{name}._sleep: {type(exc).__name__}: {str(exc)[:120]}")
    if ms <= 0.01 or not pending:
        return Hold("", "", why=f"{name}._sleep({cycles}) kept the stream busy {ms:.3f} ms")
    per_ms = max(rates)

    def launch(hold_ms: float) -> None:
        sleep(int(per_ms * hold_ms))

    return Hold(
        "_sleep", f"{name}._sleep ({per_ms:,.0f} cycles per ms, timed with events)", launch=launch
    )


def _small_mul(device: torch.device) -> Callable[[], Any]:
    a, ones = torch.ones(1 << 20, device=device), torch.ones(1 << 20, device=device)
    return lambda: a.mul_(ones)


def _small_add(device: torch.device) -> Callable[[], Any]:
    a, ones = torch.ones(1 << 20, device=device), torch.ones(1 << 20, device=device)
    out = torch.empty_like(a)
    return lambda: torch.add(a, ones, out=out)


def _large_mul(device: torch.device) -> Callable[[], Any]:
    a, ones = torch.ones(1 << 24, device=device), torch.ones(1 << 24, device=device)
    return lambda: a.mul_(ones)


def _mm(device: torch.device) -> Callable[[], Any]:
    a = torch.full((1024, 1024), 1.0 / 1024, device=device)
    out = torch.empty_like(a)
    return lambda: torch.mm(a, a, out=out)


#: standard ops to queue, lightest first (values stay finite: products of ones); each makes its
#: buffers anew for every hold, so none outlives it (a case's leak check counts what stays).
#: Tensor operands, not Python scalars: a backend may serve an op with a scalar through the CPU
#: fallback, which runs on the host and queues nothing
STEPS: tuple[tuple[str, Callable[[torch.device], Callable[[], Any]]], ...] = (
    ("mul_ on 4 MiB", _small_mul),
    ("add into 4 MiB", _small_add),
    ("mul_ on 64 MiB", _large_mul),
    ("mm 1024 x 1024", _mm),
)


def _calibrate_work(device: torch.device) -> Hold:
    """The first standard op whose queued copies outlast their launch, and how many of them
    hold a stream for a millisecond (device time measured, host launch time subtracted)."""
    stream = torch.accelerator.current_stream(device.index or 0)
    tried = []
    try:
        for name, make in STEPS:
            step = make(device)
            n, pending = 8, False
            for _ in range(4):
                torch.accelerator.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    step()
                queued = time.perf_counter() - t0
                pending = not stream.query()
                stream.synchronize()
                total = time.perf_counter() - t0
                if total >= 0.02:
                    break
                n *= 4
            del step
            per_op, per_launch = total / n, queued / n
            if pending and per_op > 1.5 * per_launch:
                ops_per_ms = 1e-3 / (per_op - per_launch)

                def launch(ms: float, make=make, ops_per_ms=ops_per_ms) -> None:
                    step = make(device)
                    for _ in range(min(MAX_OPS, max(1, math.ceil(ms * ops_per_ms)))):
                        step()

                return Hold(
                    "work",
                    f"calibrated work ({name}: {1e3 * per_op:.2f} ms of device time each, "
                    f"{1e3 * per_launch:.3f} ms to launch)",
                    launch=launch,
                )
            tried.append(
                f"{n} x {name}: query() {'False' if pending else 'True'} after the launches, "
                f"{1e3 * per_op:.3f} ms per op, {1e3 * per_launch:.3f} ms to launch"
            )
            if not pending and per_op > 1e-3:  # synchronous: heavier ops say no more
                break
    except Exception as exc:  # noqa: BLE001 - an op the device lacks ends the search
        tried.append(f"{type(exc).__name__}: {str(exc)[:120]}")
    return Hold(
        "",
        "",
        why="no work stayed queued after the host returned (a synchronous device, or one that "
        f"keeps up with the host): {'; '.join(tried)}",
    )


@contextlib.contextmanager
def holding(
    hold: Hold,
    hook: Any,
    streams: dict[torch.Stream, float],
    delays: dict[Any, dict[str, float]] | None = None,
) -> Iterator[Holds]:
    """Hold each stream for about `ms` (`streams`: stream -> ms, queued in that order) for the
    block; with the hook its kernels are delayed for the block too (and `delays`: further
    {stream or None: {kind: ms}} settings, e.g. device->host copies on every stream)."""
    settings: dict[Any, dict[str, float]] = {}
    if hold.how == "hook":
        for stream, ms in streams.items():
            settings[stream] = {"kernel": ms}
        for stream, kinds in (delays or {}).items():
            settings.setdefault(stream, {}).update(kinds)
    with set_delays(hook if settings else None, settings):
        for stream, ms in streams.items():
            hold.queue(stream, ms)
        yield Holds(hold)
