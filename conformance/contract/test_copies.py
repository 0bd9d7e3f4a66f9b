"""Contract cases of host memory and copies: pinned memory, non_blocking copies in both
directions with pinned and pageable memory, record_stream with the caching allocator
(engine/runtime_contract.py). The producer's stream is held busy first (engine/busy.py); a
device->host copy is judged on what the host read at the fence, tail first."""

from __future__ import annotations

import torch

from conformance.engine.streams import DELAY_MS, current_stream, describe, side_stream

N = 1 << 14
#: elements of the non_blocking copy into pinned memory: large enough (16 MiB) that a copy still
#: running when the host reads is caught in its tail (a copy engine the stream does not wait for
#: starts with the event: a race by microseconds on a small tensor); the other copies: 4 MiB
N_D2H = 1 << 22
N_OTHER = 1 << 20
TAIL = 1024


def _values() -> torch.Tensor:
    """Values no earlier case left in a reused block."""
    return torch.arange(N, dtype=torch.float32) + float(torch.randint(10, 10_000, ()).item())


def _first_wrong(got: torch.Tensor, want: torch.Tensor) -> str:
    bad = (got != want).nonzero()
    if not len(bad):
        return "no element differs"
    i = int(bad[0, 0])
    return (
        f"{len(bad)} of {want.numel()} elements stale, first at {i}: {got[i].item()} "
        f"instead of {want[i].item()}"
    )


def test_pinned_memory(rt):
    src = _values()
    pinned = rt.pinned(src)
    rt.check(pinned.is_pinned(), "pin_memory() returned a tensor whose is_pinned() is False")
    rt.check(torch.equal(pinned, src), "pin_memory() changed the values")
    rt.check(not src.is_pinned(), "a pageable tensor says is_pinned()")
    fresh = torch.empty(N, pin_memory=True)
    rt.check(fresh.is_pinned(), "torch.empty(pin_memory=True) is not pinned")


def test_nonblocking_h2d(rt):
    cur = current_stream(rt.device)
    want = _values()
    pinned, pageable = rt.pinned(want), want.clone()
    with rt.busy({cur: DELAY_MS}, delays={cur: {"h2d": DELAY_MS}}) as holds:
        a = pinned.to(rt.device, non_blocking=True)
        a2 = a * 2
        b = pageable.to(rt.device, non_blocking=True)
        pageable.fill_(-1.0)  # a pageable source may be reused once the call returns
        b2 = b * 2
        holds.seen(cur)
    for name, got in (("pinned", a2.cpu()), ("pageable", b2.cpu())):
        rt.check(
            torch.equal(got, want * 2),
            f"work on {describe(cur)} after a non_blocking copy from {name} memory read "
            f"{_first_wrong(got, want * 2)}",
        )


def _judged(host: torch.Tensor) -> torch.Tensor:
    """What the host holds now, its last elements read first (a late copy writes them last)."""
    tail = host[-TAIL:].clone()
    return torch.cat([host[:-TAIL].clone(), tail])


def test_nonblocking_d2h(rt):
    cur = current_stream(rt.device)
    want = torch.arange(N_D2H, dtype=torch.float32) + float(torch.randint(10, 10_000, ()).item())
    x = want.to(rt.device)
    small, want_small = x[:N_OTHER], want[:N_OTHER]
    torch.accelerator.synchronize()
    # the copies also delayed on every stream (with the hook): a runtime may run them on a copy
    # engine of its own; without it, the copy is large and its tail is read first
    with rt.busy({cur: DELAY_MS}, delays={None: {"d2h": DELAY_MS}}) as holds:
        y = x * 2
        host = rt.pinned(torch.zeros(N_D2H))
        host.copy_(y, non_blocking=True)
        done = torch.Event(device=rt.device)
        done.record(cur)
        holds.seen(cur)
        done.synchronize()
        seen = _judged(host)
        rt.check(
            torch.equal(seen, want * 2),
            f"tensor y = x * 2 copied non_blocking into pinned memory on {describe(cur)}, then "
            f"the event recorded after the copy synchronized; the pinned tensor read then: "
            f"{_first_wrong(seen, want * 2)}",
        )
        holds.queue(cur, DELAY_MS)
        z = small + 1
        moved = z.to("cpu", non_blocking=True)
        done = torch.Event(device=rt.device)
        done.record(cur)
        holds.seen(cur)
        done.synchronize()
        seen = _judged(moved)
        rt.check(
            torch.equal(seen, want_small + 1),
            f"tensor z = x + 1 moved by .to('cpu', non_blocking=True) on {describe(cur)}, then "
            f"the event recorded after it synchronized; the result read then: "
            f"{_first_wrong(seen, want_small + 1)}",
        )
        holds.queue(cur, DELAY_MS)
        w = small * 3
        pageable = torch.zeros(N_OTHER)
        pageable.copy_(w, non_blocking=True)
        seen = _judged(pageable)
        rt.check(
            torch.equal(seen, want_small * 3),
            f"tensor w = x * 3 copied non_blocking into pageable memory on {describe(cur)}: "
            f"not final when copy_ returned: {_first_wrong(seen, want_small * 3)}",
        )


def test_record_stream(rt):
    cur, side = current_stream(rt.device), side_stream(rt.device)
    value = float(torch.randint(10, 10_000, ()).item())
    a = torch.full((N,), value, device=rt.device)
    side.wait_stream(cur)
    with rt.busy({side: DELAY_MS}) as holds:
        with side:
            b = a * 2
        queued = holds.seen(side)
        a.record_stream(side)
        del a
        c = torch.full((N,), -1.0, device=rt.device)  # same size, same stream: a reusable block
        side.synchronize()
    got = b.cpu()
    rt.check(
        bool((got == 2 * value).all()),
        f"a block freed after record_stream({describe(side)}) was reused on {describe(cur)} "
        f"while {describe(side)} still read it: {got[:3].tolist()}... instead of {2 * value}"
        + ("" if queued else " (the side stream had finished)"),
    )
    rt.check(bool((c.cpu() == -1.0).all()), "the new allocation's values are wrong")
