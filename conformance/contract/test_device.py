"""Contract cases of devices: torch.accelerator and the device module, the device guard, the
generators of each device, memory statistics (engine/runtime_contract.py)."""

from __future__ import annotations

import pytest
import torch

from conformance.engine import declared_dtypes


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


def _draws(rt, g: torch.Generator | None, device: torch.device) -> torch.Tensor | None:
    """256 draws from `g` (None: the device's default generator), or None, noted, where the
    device has no random kernel or its random ops refuse its own generator (ops that run on CPU
    through the fallback): the state checks still hold, the draws are not observable."""
    try:
        return torch.rand(256, device=device, generator=g).cpu()
    except NotImplementedError as exc:
        why = f"NotImplementedError: {str(exc)[:120]}"
    except RuntimeError as exc:
        if "generator" not in str(exc):
            raise
        why = f"RuntimeError: {str(exc)[:120]}"
    rt.note_unobserved(
        f"no device generator draws: torch.rand(generator=g) raised {why}", [str(device)]
    )
    return None


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
        first = _draws(rt, g, device)
        if first is None:
            continue
        g.manual_seed(1234)
        rt.check(
            torch.equal(_draws(rt, g, device), first),
            f"manual_seed(1234) twice on {device}: the draws after each differ",
        )
        after = g.get_state()  # a state saved after draws, not after seeding
        second = _draws(rt, g, device)
        rt.check(
            not torch.equal(first, second), f"two draws of one generator on {device} are equal"
        )
        _draws(rt, g, device)
        g.set_state(after)
        again = _draws(rt, g, device)
        restarted = " (they are the draws right after seeding: a restore that keeps the seed only)"
        rt.check(
            torch.equal(again, second),
            f"set_state of a state saved after draws on {device} did not resume there: the next "
            f"draws differ from those made after the save"
            + (restarted if torch.equal(again, first) else ""),
        )
    _default_generator(rt, indices)


def _default_generator(rt, indices: list[int]) -> None:
    """The device module's default generator: seeding it, and its saved state, govern the
    device's draws; each device keeps its own; fork_rng restores it."""
    seed = getattr(rt.module, "manual_seed", None)
    get, put = (getattr(rt.module, n, None) for n in ("get_rng_state", "set_rng_state"))
    if callable(seed):
        seed(77)
        first = _draws(rt, None, rt.device)
        seed(77)
        if first is not None:
            rt.check(
                torch.equal(_draws(rt, None, rt.device), first),
                f"torch.{rt.device_type}.manual_seed(77) twice: the device's draws after each "
                "differ (its random ops do not draw from the device's default generator)",
            )
    if not (callable(get) and callable(put)):
        return
    saved = get(0)
    first = _draws(rt, None, rt.device)
    put(saved, 0)
    if first is not None:
        rt.check(
            torch.equal(_draws(rt, None, rt.device), first),
            f"torch.{rt.device_type}.set_rng_state(get_rng_state()) did not replay the draws made "
            "after the save",
        )
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


#: bytes of the block the memory item allocates: its own segment in a caching allocator (CUDA's
#: rounds allocations above 10 MiB to 2 MiB and never shares their segment)
BLOCK = 64 << 20


def _memory_apis(rt) -> dict[str, tuple]:
    """name -> (memory_allocated, memory_reserved or None) of torch.accelerator and of the device
    module, each where it has them and they answer."""
    apis = {}
    for name, owner in (
        ("torch.accelerator", torch.accelerator),
        (f"torch.{rt.device_type}", rt.module),
    ):
        allocated = getattr(owner, "memory_allocated", None)
        if not callable(allocated):
            continue
        try:
            allocated(0)
        except Exception:  # noqa: BLE001 - this API keeps no statistics torch can read
            continue
        reserved = getattr(owner, "memory_reserved", None)
        apis[name] = (allocated, reserved if callable(reserved) else None)
    if not apis:
        pytest.skip(
            "not applicable: neither torch.accelerator nor the device module has a "
            "memory_allocated that answers"
        )
    return apis


def _read(rt, apis: dict[str, tuple], when: str) -> tuple[int, int | None]:
    """(allocated, reserved) now; where both APIs answer they must agree."""
    seen = {
        name: (allocated(0), reserved(0) if reserved else None)
        for name, (allocated, reserved) in apis.items()
    }
    (first, (a, r)), *others = seen.items()
    for name, (a2, r2) in others:
        rt.check(
            a2 == a and (r is None or r2 is None or r2 == r),
            f"{when}: {first}.memory_allocated() {a} and memory_reserved() {r}, but "
            f"{name}.memory_allocated() {a2} and memory_reserved() {r2}",
        )
    if r is None:
        r = next((r2 for _, r2 in seen.values() if r2 is not None), None)
    if r is not None:
        rt.check(r >= a, f"{when}: memory_reserved {r} is below memory_allocated {a}")
    return a, r


def test_memory_stats(rt):
    apis = _memory_apis(rt)
    empty = getattr(torch.accelerator, "empty_cache", None) or getattr(
        rt.module, "empty_cache", None
    )
    rt.idle()
    if callable(empty):
        empty()
    before, _ = _read(rt, apis, "before allocating")
    x = torch.empty(BLOCK // 4, device=rt.device)
    grown, held = _read(rt, apis, f"with a {BLOCK >> 20} MiB block allocated")
    rt.check(
        grown - before >= x.nbytes,
        f"memory_allocated grew by {grown - before} bytes after allocating {x.nbytes}",
    )
    del x
    after, _ = _read(rt, apis, f"after freeing the {BLOCK >> 20} MiB block")
    rt.check(
        after <= grown - BLOCK,
        f"memory_allocated is {after} after freeing {BLOCK >> 20} MiB ({grown} before the free)",
    )
    if callable(empty) and held is not None:
        empty()
        _, now = _read(rt, apis, "after empty_cache")
        rt.check(
            now is not None and now <= held - BLOCK,
            f"after freeing the {BLOCK >> 20} MiB block and empty_cache(), memory_reserved is "
            f"{now} ({held} while the block was allocated): the freed block was not released",
        )


def test_declared_dtypes(rt):
    declare = getattr(torch.accelerator, "get_device_capability", None)
    if declare is None:
        rt.note_unobserved(f"torch {torch.__version__} has no get_device_capability")
        return
    try:
        declared = set(declare(rt.device)["supported_dtypes"])
    except Exception as exc:  # noqa: BLE001 - a device that declares nothing: said, not failed
        first = (str(exc).strip().splitlines() or [""])[0][:120]
        rt.note_unobserved(
            f"the device declares no dtypes (get_device_capability raises "
            f"{type(exc).__name__}: {first})"
        )
        return
    wrong = declared_dtypes.differences(declared, declared_dtypes.tried(rt.device))
    rt.check(not wrong, "; ".join(wrong))
