"""Contract cases of host memory and copies: pinned memory, non_blocking copies in both
directions with pinned and pageable memory, record_stream with the caching allocator
(engine/runtime_contract.py)."""

from __future__ import annotations

import torch

from conformance.engine.streams import DELAY_MS, busy, current_stream, describe, side_stream

N = 1 << 14


def _values() -> torch.Tensor:
    """Values no earlier case left in a reused block."""
    return torch.arange(N, dtype=torch.float32) + float(torch.randint(10, 10_000, ()).item())


def _pinned(rt, t: torch.Tensor) -> torch.Tensor:
    try:
        return t.pin_memory()
    except Exception as exc:  # noqa: BLE001 - a device with streams pins memory
        raise rt.broken(f"pin_memory() raised {type(exc).__name__}: {str(exc)[:160]}") from None


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
    pinned = _pinned(rt, src)
    rt.check(pinned.is_pinned(), "pin_memory() returned a tensor whose is_pinned() is False")
    rt.check(torch.equal(pinned, src), "pin_memory() changed the values")
    rt.check(not src.is_pinned(), "a pageable tensor says is_pinned()")
    fresh = torch.empty(N, pin_memory=True)
    rt.check(fresh.is_pinned(), "torch.empty(pin_memory=True) is not pinned")


def test_nonblocking_h2d(rt):
    cur = current_stream(rt.device)
    want = _values()
    pinned, pageable = _pinned(rt, want), want.clone()
    with rt.delays({cur: {"h2d": DELAY_MS, "kernel": DELAY_MS}}):
        a = pinned.to(rt.device, non_blocking=True)
        a2 = a * 2
        b = pageable.to(rt.device, non_blocking=True)
        pageable.fill_(-1.0)  # a pageable source may be reused once the call returns
        b2 = b * 2
    for name, got in (("pinned", a2.cpu()), ("pageable", b2.cpu())):
        rt.check(
            torch.equal(got, want * 2),
            f"work on {describe(cur)} after a non_blocking copy from {name} memory read "
            f"{_first_wrong(got, want * 2)}",
        )


def test_nonblocking_d2h(rt):
    cur = current_stream(rt.device)
    want = _values()
    x = want.to(rt.device)
    torch.accelerator.synchronize()
    # the copies delayed on every stream: a runtime may run them on a copy engine of its own
    with rt.delays({cur: {"kernel": DELAY_MS}, None: {"d2h": DELAY_MS}}):
        y = x * 2
        host = _pinned(rt, torch.zeros(N))
        host.copy_(y, non_blocking=True)
        done = torch.Event(device=rt.device)
        done.record(cur)
        done.synchronize()
        rt.check(
            torch.equal(host, want * 2),
            f"tensor y = x * 2 copied non_blocking into pinned memory on {describe(cur)}, then "
            f"the event recorded after the copy synchronized: {_first_wrong(host, want * 2)}",
        )
        z = x + 1
        moved = z.to("cpu", non_blocking=True)
        done = torch.Event(device=rt.device)
        done.record(cur)
        done.synchronize()
        rt.check(
            torch.equal(moved, want + 1),
            f"tensor z = x + 1 moved by .to('cpu', non_blocking=True) on {describe(cur)}, then "
            f"the event recorded after it synchronized: {_first_wrong(moved, want + 1)}",
        )
        w = x * 3
        pageable = torch.zeros(N)
        pageable.copy_(w, non_blocking=True)
        rt.check(
            torch.equal(pageable, want * 3),
            f"tensor w = x * 3 copied non_blocking into pageable memory on {describe(cur)}: "
            f"not final when copy_ returned: {_first_wrong(pageable, want * 3)}",
        )


def test_record_stream(rt):
    cur, side = current_stream(rt.device), side_stream(rt.device)
    value = float(torch.randint(10, 10_000, ()).item())
    a = torch.full((N,), value, device=rt.device)
    side.wait_stream(cur)
    with rt.delays({side: {"kernel": DELAY_MS}}):
        with side:
            b = a * 2
        queued = busy(side)
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
