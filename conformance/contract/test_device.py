"""Contract cases of devices: torch.accelerator and the device module, the device guard, the
generators of each device, memory statistics (engine/runtime_contract.py)."""

from __future__ import annotations

import pytest
import torch


class Planned(Exception):
    """Raised inside a guard to see it restore on an exception."""


def _index() -> int:
    return torch.accelerator.current_device_index()


def test_accelerator_device(rt):
    acc = torch.accelerator.current_accelerator()
    rt.check(acc is not None and acc.type == rt.device_type, f"current_accelerator() is {acc}")
    count, module_count = torch.accelerator.device_count(), rt.backend.device_count()
    rt.check(
        count == module_count, f"device_count() is {count}, the device module says {module_count}"
    )
    before = _index()
    rt.check(before == 0, f"current_device_index() is {before} before anything set it")
    target = rt.second if rt.second is not None else 0
    torch.accelerator.set_device_index(target)
    try:
        now = _index()
        current = getattr(rt.module, "current_device", None)
        rt.check(now == target, f"set_device_index({target}) then current_device_index() is {now}")
        if callable(current):
            rt.check(
                current() == target,
                f"set_device_index({target}) then the device module's current_device() is "
                f"{current()}",
            )
    finally:
        torch.accelerator.set_device_index(before)
    rt.check(_index() == before, f"set_device_index({before}) did not restore device {before}")
    with pytest.raises(Planned):
        with torch.accelerator.device_index(target):
            rt.check(
                _index() == target,
                f"inside device_index({target}) the current device is {_index()}",
            )
            raise Planned
    rt.check(
        _index() == before,
        f"device_index({target}) left device {_index()} current after an exception",
    )


def test_device_guard(rt):
    one, t = rt.second, rt.device_type
    with torch.accelerator.device_index(one):
        a = torch.ones(64, device=t)
        rt.check(
            a.device.index == one,
            f"inside device_index({one}) torch.ones(device='{t}') is on {a.device}",
        )
        b = torch.full((64,), 2.0, device=f"{t}:{one}")
        c = a + b
        rt.check(
            c.device.index == one, f"an op of two {t}:{one} tensors returned a tensor on {c.device}"
        )
        values = c.cpu()
        rt.check(
            bool((values == 3.0).all()), f"ones + 2 on {t}:{one} gave {values[:4].tolist()}..."
        )
    rt.check(_index() == 0, f"device_index({one}) left device {_index()} current on exit")
    explicit = torch.empty(8, device=f"{t}:{one}")
    rt.check(
        explicit.device.index == one, f"torch.empty(device='{t}:{one}') is on {explicit.device}"
    )
    with pytest.raises(Planned):
        with torch.accelerator.device_index(one):
            raise Planned
    rt.check(
        _index() == 0, f"device_index({one}) left device {_index()} current after an exception"
    )


def _draws(g: torch.Generator, device: torch.device) -> torch.Tensor | None:
    """256 draws from `g`, or None where the device has no random kernel or its random ops
    refuse its own generator (ops that run on CPU through the fallback): the op cases judge
    draws; this item judges the generators' states."""
    try:
        return torch.rand(256, device=device, generator=g).cpu()
    except NotImplementedError:
        return None
    except RuntimeError as exc:
        if "generator" in str(exc):
            return None
        raise


def test_generator_state(rt):
    indices = [0] if rt.second is None else [0, rt.second]
    for index in indices:
        device = rt.on(index)
        g = torch.Generator(device=device)
        g.manual_seed(1234)
        rt.check(
            g.initial_seed() == 1234,
            f"manual_seed(1234) on {device}: initial_seed() is {g.initial_seed()}",
        )
        state = g.get_state()
        g.manual_seed(4321)
        other = g.get_state()
        rt.check(not torch.equal(state, other), f"two seeds give one state on {device}")
        g.set_state(state)
        rt.check(torch.equal(g.get_state(), state), f"set_state then get_state on {device} differ")
        first = _draws(g, device)
        if first is None:
            continue
        after = g.get_state()
        second = _draws(g, device)
        rt.check(
            not torch.equal(first, second), f"two draws of one generator on {device} are equal"
        )
        g.set_state(after)
        again = _draws(g, device)
        rt.check(
            torch.equal(again, second), f"get_state/set_state on {device} did not replay the draws"
        )
    get, put = (getattr(rt.module, n, None) for n in ("get_rng_state", "set_rng_state"))
    if not (callable(get) and callable(put)):
        return
    if len(indices) > 1:  # each device's default generator keeps its own state
        zero, one = get(0), get(indices[1])
        g = torch.Generator(device=rt.on(indices[1]))
        g.manual_seed(int(torch.randint(1, 2**31, ()).item()))
        put(g.get_state(), indices[1])
        rt.check(torch.equal(get(0), zero), "setting device 1's generator state changed device 0's")
        rt.check(not torch.equal(get(indices[1]), one), "set_rng_state on device 1 had no effect")
    before = get(0)
    with torch.random.fork_rng(devices=[0], device_type=rt.device_type):
        g = torch.Generator(device=rt.device)
        g.manual_seed(99)
        put(g.get_state(), 0)
        rt.check(not torch.equal(get(0), before), "set_rng_state inside fork_rng had no effect")
    rt.check(
        torch.equal(get(0), before),
        "torch.random.fork_rng did not restore the default generator's state",
    )


def _memory_api(rt):
    allocated = getattr(torch.accelerator, "memory_allocated", None) or getattr(
        rt.module, "memory_allocated", None
    )
    reserved = getattr(torch.accelerator, "memory_reserved", None) or getattr(
        rt.module, "memory_reserved", None
    )
    if not callable(allocated):
        pytest.skip(
            "not applicable: neither torch.accelerator nor the device module has memory_allocated"
        )
    try:
        allocated(0)
    except Exception as exc:  # noqa: BLE001 - the device keeps no statistics torch can read
        pytest.skip(
            f"not applicable: memory_allocated(0) raised {type(exc).__name__}: {str(exc)[:120]}"
        )
    return allocated, reserved


def test_memory_stats(rt):
    allocated, reserved = _memory_api(rt)
    rt.idle()
    before = allocated(0)
    x = torch.empty(1 << 20, device=rt.device)  # 4 MiB
    grown = allocated(0)
    rt.check(
        grown - before >= x.nbytes,
        f"memory_allocated grew by {grown - before} bytes after allocating {x.nbytes}",
    )
    if callable(reserved):
        r = reserved(0)
        rt.check(r >= grown, f"memory_reserved {r} is below memory_allocated {grown}")
    del x
    after = allocated(0)
    rt.check(
        after <= grown - (1 << 22),
        f"memory_allocated is {after} after freeing 4 MiB ({grown} before the free)",
    )
    empty = getattr(torch.accelerator, "empty_cache", None) or getattr(
        rt.module, "empty_cache", None
    )
    if callable(empty) and callable(reserved):
        empty()
        r, a = reserved(0), allocated(0)
        rt.check(r >= a, f"after empty_cache memory_reserved {r} is below memory_allocated {a}")
