"""Contract cases of streams and events: the current stream and its guard, synchronisation,
events and their timing, priorities, waits across streams (engine/runtime_contract.py). The
stream whose work a fence orders is held busy first (engine/busy.py) and seen busy just before
the fence is tested; what could not be seen is said in the record."""

from __future__ import annotations

import time

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
        _runs_behind_the_set_stream(rt, side)
        _runs_beside_the_former_stream(rt, before, side)
    finally:
        torch.accelerator.set_stream(before)
    after = current_stream(rt.device)
    rt.check(after == before, f"set_stream({describe(before)}) left {describe(after)} current")


def _runs_behind_the_set_stream(rt, side: torch.Stream) -> None:
    """The set stream busy, the former one idle: an op and a copy_ launched now must wait for
    the set stream's earlier work (misrouted to the idle stream, they read the input early)."""
    value = _value()
    src = torch.zeros(N, device=rt.device)
    side.synchronize()
    with rt.busy({side: DELAY_MS}) as holds:
        src.fill_(value)
        op = src * 2
        copied = torch.empty_like(src)
        copied.copy_(src)
        holds.seen(side)
    torch.accelerator.synchronize()
    for what, got, want in (("an op (x * 2)", op, 2 * value), ("a copy_", copied, value)):
        got = got.cpu()
        rt.check(
            bool((got == want).all()),
            f"{what} launched with {describe(side)} current read its input before the earlier "
            f"work of that stream wrote it: {got[:3].tolist()}... instead of {want} (it ran on "
            "another stream)",
        )


def _runs_beside_the_former_stream(rt, former: torch.Stream, side: torch.Stream) -> None:
    """The former stream busy, the set one idle: an op and a non_blocking copy into pinned memory
    launched now are done when the set stream's synchronize() returns (misrouted to the busy
    stream, they are not)."""
    value = _value()
    x = torch.full((N,), value, device=rt.device)
    host = rt.pinned(torch.zeros(N))
    torch.accelerator.synchronize()
    with rt.busy({former: DELAY_MS}) as holds:
        y = x * 3
        host.copy_(y, non_blocking=True)
        side.synchronize()
        holds.seen(former)
        seen = host.clone()
    rt.check(
        bool((seen == 3 * value).all()),
        f"an op (x * 3) and its non_blocking copy into pinned memory, launched with "
        f"{describe(side)} current, were not done when {describe(side)}.synchronize() returned "
        f"while {describe(former)} was busy: the pinned tensor read {seen[:3].tolist()}... "
        f"instead of {3 * value} (they were queued on another stream)",
    )


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
    # with the hook, kernels are delayed on every stream: a runtime may run a side stream's
    # kernels on a queue no stream object names (only the side stream's work is in the block)
    with rt.busy({side: DELAY_MS}, delays={None: {"kernel": DELAY_MS}}) as holds:
        with side:
            y = x * 2
        holds.seen(side)
        side.synchronize()
        rt.check(
            side.query(),
            f"{describe(side)}.synchronize() returned while query() is False (its kernel not done)",
        )
        got = y.cpu()  # read on another stream: y must be final once its stream synchronized
    want = x.cpu() * 2
    rt.check(
        torch.equal(got, want),
        f"{describe(side)}.synchronize() returned before the kernel queued on it (y = x * 2) had "
        f"written y: read {got[:3].tolist()}... instead of {want[:3].tolist()}...",
    )


def test_accelerator_synchronize(rt):
    cur, side = current_stream(rt.device), side_stream(rt.device)
    x = torch.full((N,), _value(), device=rt.device)
    side.wait_stream(cur)
    # the stream that is not current is held longest and queued last: a synchronize that waits
    # for the current stream only returns with it busy
    with rt.busy({cur: DELAY_MS, side: 2 * DELAY_MS}) as holds:
        z = x * 2
        with side:
            y = x * 3
        holds.seen(side)
        torch.accelerator.synchronize()
        left = [describe(s) for s in (cur, side) if busy(s)]
        rt.check(
            not left,
            f"torch.accelerator.synchronize() returned with work queued on {', '.join(left)}",
        )
    sync = getattr(rt.module, "synchronize", None)
    if callable(sync):
        with rt.busy({cur: DELAY_MS, side: 2 * DELAY_MS}) as holds:
            with side:
                y = y + 1
            z = z + 1
            holds.seen(side)
            sync()
            left = [describe(s) for s in (cur, side) if busy(s)]
            rt.check(
                not left,
                f"torch.{rt.device_type}.synchronize() returned with work queued on "
                f"{', '.join(left)}",
            )
    rt.check(
        torch.equal(y.cpu(), x.cpu() * 3 + int(callable(sync)))
        and torch.equal(z.cpu(), x.cpu() * 2 + int(callable(sync))),
        "results after synchronize are wrong",
    )


def test_event_synchronize(rt):
    cur = current_stream(rt.device)
    x = torch.full((N,), _value(), device=rt.device)
    with rt.busy({cur: DELAY_MS}) as holds:
        y = x * 2
        event = torch.Event(device=rt.device)
        event.record(cur)
        holds.seen(cur)
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
    with rt.busy({cur: DELAY_MS}) as holds:
        a.record(cur)
        holds.queue(cur, DELAY_MS)
        y = x * 2
        b.record(cur)
        holds.queue(cur, DELAY_MS)
        y = y * 2
        c.record(cur)
        queued = holds.seen(cur)
        span = _span_seen_from_the_host(a, c)
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
    floor = holds.hold.floor_ms(DELAY_MS)  # what a held span must cover, where it is known
    if queued and floor:
        rt.check(
            ab >= floor and bc >= floor,
            f"a->b {ab:.3f} and b->c {bc:.3f} ms do not cover the {floor:g} ms of work held "
            f"between them by {holds.hold.what}",
        )
    if span is not None:  # a was done and c was not, seen from the host this long: a floor
        rt.check(
            ac >= 0.9 * span - 1.0,
            f"a->c {ac:.3f} ms, but the host saw a done and c not yet done {span:.3f} ms apart "
            f"(the work held by {holds.hold.what} between them): the events do not time the "
            "device's work",
        )
    elif queued and not floor:
        rt.note_unobserved(
            "elapsed_time's coverage of the held work: the host never saw a done while c was "
            f"not, and a hold by {holds.hold.what or 'nothing'} has no known floor",
            [describe(cur)],
        )
    rt.check(torch.equal(y.cpu(), x.cpu() * 4), "the timed work gave wrong values")


def _span_seen_from_the_host(a: torch.Event, c: torch.Event) -> float | None:
    """Milliseconds between the first moment the host saw `a` done and the last moment it saw
    `c` not done, polling both (a lower bound of the device time from a to c that needs no
    timing of the device's own, issue 79: a runtime that reported host enqueue times, 0.5 ms
    for 241 ms of held work, passed under calibrated-work holds, whose floor is unknown);
    None where the host never saw a done before c."""
    a_done = c_pending = None
    deadline = time.perf_counter() + 30.0
    while time.perf_counter() < deadline:
        now = time.perf_counter()
        if c.query():
            break
        c_pending = now
        if a_done is None and a.query():
            a_done = now
    if a_done is None or c_pending is None or c_pending <= a_done:
        return None
    return (c_pending - a_done) * 1000.0


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
    with rt.busy({cur: DELAY_MS}) as holds:
        src = torch.full((N,), value, device=rt.device)
        holds.seen(cur)
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
    with rt.busy({cur: DELAY_MS}) as holds:
        src = torch.full((N,), value, device=rt.device)
        ready = torch.Event(device=rt.device)
        ready.record(cur)
        holds.seen(cur)
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
