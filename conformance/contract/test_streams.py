"""Contract cases of streams and events: the current stream and its guard, synchronisation,
events and their timing, priorities, waits across streams (engine/runtime_contract.py). Each
producer whose fence is tested is delayed when the backend has a delay injector."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.streams import DELAY_MS, busy, current_stream, describe, side_stream

N = 1 << 14


class Planned(Exception):
    """Raised inside a guard to see it restore on an exception."""


def _value() -> float:
    """A value no earlier case left in a reused block."""
    return float(torch.randint(10, 10_000, ()).item())


def test_current_stream(rt):
    before = current_stream(rt.device)
    side = side_stream(rt.device)
    torch.accelerator.set_stream(side)
    try:
        now = current_stream(rt.device)
        rt.check(
            now == side, f"set_stream({describe(side)}) then current_stream() is {describe(now)}"
        )
        with rt.delays({side: {"kernel": DELAY_MS}}):
            y = torch.ones(N, device=rt.device) * 2
            went_elsewhere = not busy(side) and busy(before)
            rt.check(
                not went_elsewhere,
                f"work launched after set_stream({describe(side)}) was queued on "
                f"{describe(before)}",
            )
            side.synchronize()
        rt.check(bool((y.cpu() == 2).all()), "work on the set stream gave wrong values")
    finally:
        torch.accelerator.set_stream(before)
    after = current_stream(rt.device)
    rt.check(after == before, f"set_stream({describe(before)}) left {describe(after)} current")


def test_stream_guard(rt):
    before = current_stream(rt.device)
    side = side_stream(rt.device)
    with side:
        inside = current_stream(rt.device)
        rt.check(
            inside == side,
            f"inside `with {describe(side)}:` current_stream() is {describe(inside)}",
        )
    rt.check(
        current_stream(rt.device) == before,
        f"`with {describe(side)}:` left {describe(current_stream(rt.device))} current on exit",
    )
    with pytest.raises(Planned):
        with side:
            raise Planned
    rt.check(
        current_stream(rt.device) == before,
        f"`with {describe(side)}:` left {describe(current_stream(rt.device))} current after an "
        f"exception",
    )
    if rt.second is not None:
        other = side_stream(rt.on(rt.second))
        with other:
            index = torch.accelerator.current_device_index()
            rt.check(
                index == rt.second,
                f"inside `with {describe(other)}:` the current device is {index}",
            )
            now = current_stream(rt.on(rt.second))
            rt.check(
                now == other,
                f"inside `with {describe(other)}:` current_stream({rt.second}) is {describe(now)}",
            )
        index = torch.accelerator.current_device_index()
        rt.check(index == 0, f"`with {describe(other)}:` left device {index} current on exit")


def test_stream_synchronize(rt):
    side = side_stream(rt.device)
    x = torch.full((N,), _value(), device=rt.device)
    side.wait_stream(current_stream(rt.device))
    with rt.delays({side: {"kernel": DELAY_MS}}):
        with side:
            y = x * 2
        side.synchronize()
        rt.check(
            side.query(),
            f"{describe(side)}.synchronize() returned while query() is False (its kernel not done)",
        )
    rt.check(torch.equal(y.cpu(), x.cpu() * 2), "the synchronized stream's result is wrong")


def test_accelerator_synchronize(rt):
    cur, side = current_stream(rt.device), side_stream(rt.device)
    x = torch.full((N,), _value(), device=rt.device)
    side.wait_stream(cur)
    with rt.delays({cur: {"kernel": DELAY_MS}, side: {"kernel": DELAY_MS}}):
        with side:
            y = x * 3
        z = x * 2
        torch.accelerator.synchronize()
        left = [describe(s) for s in (cur, side) if busy(s)]
        rt.check(
            not left,
            f"torch.accelerator.synchronize() returned with work queued on {', '.join(left)}",
        )
        sync = getattr(rt.module, "synchronize", None)
        if callable(sync):
            with side:
                y = y + 1
            z = z + 1
            sync()
            left = [describe(s) for s in (cur, side) if busy(s)]
            rt.check(
                not left,
                f"torch.{rt.device_type}.synchronize() returned with work queued on "
                f"{', '.join(left)}",
            )
    rt.check(
        torch.equal(y.cpu(), x.cpu() * 3 + 1) and torch.equal(z.cpu(), x.cpu() * 2 + 1),
        "results after synchronize are wrong",
    )


def test_event_synchronize(rt):
    cur = current_stream(rt.device)
    x = torch.full((N,), _value(), device=rt.device)
    with rt.delays({cur: {"kernel": DELAY_MS}}):
        y = x * 2
        event = torch.Event(device=rt.device)
        event.record(cur)
        event.synchronize()
        rt.check(
            event.query(),
            f"Event.synchronize() of the event recorded on {describe(cur)} after a kernel "
            f"returned while query() is False",
        )
    rt.check(torch.equal(y.cpu(), x.cpu() * 2), "the result before the event is wrong")


def test_event_elapsed_time(rt):
    cur = current_stream(rt.device)
    x = torch.full((N,), _value(), device=rt.device)
    a, b, c = (torch.Event(device=rt.device, enable_timing=True) for _ in range(3))
    with rt.delays({cur: {"kernel": DELAY_MS}}) as delayed:
        a.record(cur)
        y = x * 2
        b.record(cur)
        y = y * 2
        c.record(cur)
        queued = busy(cur)
        c.synchronize()
        try:
            ab, bc, ac = a.elapsed_time(b), b.elapsed_time(c), a.elapsed_time(c)
        except RuntimeError as exc:
            raise rt.broken(
                f"elapsed_time after c.synchronize() raised: {str(exc)[:160]}"
            ) from None
    rt.check(
        min(ab, bc, ac) >= 0,
        f"elapsed times a->b {ab:.3f}, b->c {bc:.3f}, a->c {ac:.3f} ms: one is negative",
    )
    rt.check(
        abs(ab + bc - ac) <= max(1.0, 0.05 * ac),
        f"a->b {ab:.3f} + b->c {bc:.3f} ms is not a->c {ac:.3f} ms",
    )
    if delayed and queued:  # the kernels between the events each slept DELAY_MS
        rt.check(
            ab >= 0.8 * DELAY_MS and bc >= 0.8 * DELAY_MS,
            f"a->b {ab:.3f} and b->c {bc:.3f} ms do not cover a {DELAY_MS} ms kernel each",
        )
    rt.check(torch.equal(y.cpu(), x.cpu() * 4), "the timed work gave wrong values")


def test_stream_priority(rt):
    priority_of = getattr(rt.module, "stream_priority", None)
    ask = getattr(rt.module, "priority_range", None)
    least, greatest = ask() if callable(ask) else (0, -1)
    x = torch.full((N,), _value(), device=rt.device)
    for priority in sorted({least, greatest}):
        s = torch.Stream(device=rt.device, priority=priority)
        s.wait_stream(current_stream(rt.device))
        with s:
            y = x + priority
        s.synchronize()
        rt.check(
            torch.equal(y.cpu(), x.cpu() + priority),
            f"work on a stream of priority {priority} gave wrong values",
        )
        if callable(priority_of):
            got = priority_of(s)
            rt.check(
                got == priority,
                f"torch.Stream(priority={priority}) has priority {got} "
                f"(torch.{rt.device_type}.stream_priority)",
            )


def test_wait_stream(rt):
    cur, side = current_stream(rt.device), side_stream(rt.device)
    value = _value()
    with rt.delays({cur: {"kernel": DELAY_MS}}):
        src = torch.full((N,), value, device=rt.device)
        side.wait_stream(cur)
        with side:
            dst = src * 2
        side.synchronize()
    got = dst.cpu()
    rt.check(
        bool((got == 2 * value).all()),
        f"{describe(side)} waited on {describe(cur)} (wait_stream) yet read the input before "
        f"it was written: {got[:3].tolist()}... instead of {2 * value}",
    )


def test_wait_event(rt):
    cur, side = current_stream(rt.device), side_stream(rt.device)
    value = _value()
    with rt.delays({cur: {"kernel": DELAY_MS}}):
        src = torch.full((N,), value, device=rt.device)
        ready = torch.Event(device=rt.device)
        ready.record(cur)
        side.wait_event(ready)
        with side:
            dst = src * 2
        side.synchronize()
    got = dst.cpu()
    rt.check(
        bool((got == 2 * value).all()),
        f"{describe(side)} waited on the event recorded on {describe(cur)} after the input's "
        f"kernel, yet read it before it was written: {got[:3].tolist()}... instead of "
        f"{2 * value}",
    )
