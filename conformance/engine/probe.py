"""Is the device usable here, and which standard API counts its memory? Asked once per run.

The probe allocates one small tensor, so it initialises the device: it runs in a forked child
when the asking process must stay uninitialised (it forks the case runners later), in a fresh
interpreter (`python -m conformance.engine.probe`) when a forked child cannot use the device,
or in-process where the cases run in-process anyway (xdist workers, `--isolate none`).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

import torch

from conformance.engine import heap, interpreter
from conformance.engine.backend import Backend, load_backend
from conformance.engine.memory import counters
from conformance.engine.profile import Fact
from conformance.engine.transfer import has_storage

PROBE_ELEMENTS = 256  # float32: 1 KiB, enough for any allocator to count
PROBE_TIMEOUT = 120.0


@dataclass
class Probe:
    """What one probe found."""

    usable: bool
    where: str  # "in-process", "forked child", "fresh process"
    error: str = ""  # why the device was not usable
    bad_fork: bool = False  # the device refused use in a forked child
    memory_counter: str | None = None  # the first counter of memory.counters that saw the tensor
    # a non-empty tensor's storage has bytes and a data pointer (a lazy device's, as torch_xla's,
    # has none: strides, offsets and memory around views cannot be observed)
    storage: bool = True
    # the suite's heap red zones (engine/heap.py): what was installed, or why nothing was, and
    # whether the probe's device tensor was allocated through them
    heap: str = ""
    heap_seen: bool = False
    # the runtime around kernels (streams, events, pinned memory, generator): {fact: [value,
    # how]}, probed after the facts above (a probe that crashes here loses only these)
    runtime: dict[str, list] = field(default_factory=dict)

    def facts(self, where: str | None = None) -> dict[str, Fact]:
        """The probe's facts as device-profile facts (engine/profile.py)."""
        at = f"probed in a {where or self.where}"
        if not self.usable:
            return {"usable": Fact(False, f"{at}: {self.error}")}
        fork = (
            Fact(not self.bad_fork, f"{at}")
            if self.where == "forked child"
            else Fact(None, "not probed in a forked child")
        )
        found = {
            "usable": Fact(True, f"{at}: a {PROBE_ELEMENTS}-element float32 tensor allocated"),
            "storage": Fact(self.storage, f"{at}: untyped_storage() has bytes and a data pointer"),
            "memory_counter": Fact(
                self.memory_counter, f"{at}: the first counter that saw the allocation"
            ),
            "fork_safe": fork,
            "heap_zones": Fact(self.heap_seen, self.heap or at),
        }
        for name, (value, how) in self.runtime.items():
            found[name] = Fact(value, f"{at}: {how}")
        return found


def initialised(backend: Backend) -> bool:
    """Whether the device is initialised in this process (its module's `is_initialized()`):
    then a forked child could not use it. A failing query is no evidence of initialisation."""
    fn = backend.device_function("is_initialized")
    try:
        return bool(fn()) if callable(fn) else False
    except Exception:  # noqa: BLE001
        return False


def probe_here(backend: Backend, where: str = "in-process") -> Probe:
    """Allocate on the device in this process; find which memory counter sees the tensor."""
    in_bad_fork = backend.device_function("_is_in_bad_fork")
    try:
        if in_bad_fork is not None and in_bad_fork():
            return Probe(
                False, where, f"torch.{backend.device_type}._is_in_bad_fork() is True", True
            )
    except Exception:  # noqa: BLE001 - a broken query is not a verdict on the device
        pass
    candidates = counters(backend)
    zones, how = heap.watch(backend.module, backend.heap_zones, backend.heap_cache)
    try:
        before = {name: _read(fn) for name, fn in candidates}
        heap_before = zones.stats() if zones is not None else None
        tensor = torch.empty(PROBE_ELEMENTS, dtype=torch.float32, device=backend.device)
        after = {name: _read(fn) for name, fn in candidates}
        heap_after = zones.stats() if zones is not None else None
        storage = has_storage(tensor)
        del tensor
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable here
        text = _first_line(exc)
        return Probe(False, where, text, "fork" in text.lower())
    heap_seen = bool(
        heap_before
        and heap_after
        and heap_after[0] > heap_before[0]
        and heap_after[3] >= 4 * PROBE_ELEMENTS
    )
    if zones is not None and not heap_seen:
        how += "; the device's memory is not allocated through them (a pool of its own)"
    backend.heap = zones if heap_seen else None  # the process runs cases: it keeps them
    seen = None
    for name, _ in candidates:
        if (
            None not in (before[name], after[name])
            and after[name] - before[name] >= 4 * PROBE_ELEMENTS
        ):
            seen = name
            break
    return Probe(True, where, memory_counter=seen, storage=storage, heap=how, heap_seen=heap_seen)


def probe_runtime(device: torch.device) -> dict[str, list]:
    """The runtime around kernels, each probed on its own: {fact: [value, how]}."""

    def stream() -> bool:
        module = getattr(torch, device.type, None)
        if not callable(getattr(module, "current_stream", None)):
            raise LookupError(
                f"torch.{device.type} has no current_stream(): its device module declares no "
                "streams"
            )
        s = torch.Stream(device=device)
        s.query()
        s.synchronize()
        return True

    def event() -> bool:
        s = torch.Stream(device=device)
        e = torch.Event(device=device)
        e.record(s)
        e.synchronize()
        e.query()  # what it answers is the contract cases' to judge (event-synchronize)
        return True

    def generator() -> bool:
        g = torch.Generator(device=device)
        g.manual_seed(1)
        return g.get_state().numel() > 0

    asks = {
        "streams": (
            stream,
            f"torch.{device.type}.current_stream() exists; torch.Stream(device) created, "
            "queried, synchronized",
        ),
        "events": (event, "torch.Event(device) recorded on a stream, synchronized, queried"),
        "pinned_memory": (
            lambda: bool(torch.empty(8).pin_memory().is_pinned()),
            "torch.empty(8).pin_memory().is_pinned()",
        ),
        "generator": (generator, "torch.Generator(device) seeded, its state read"),
    }
    found: dict[str, list] = {}
    for name, (ask, how) in asks.items():
        try:
            found[name] = [ask(), how]
        except Exception as exc:  # noqa: BLE001 - the device lacks it: say how it refused
            found[name] = [False, f"{how}: {type(exc).__name__}: {_first_line(exc)[:120]}"]
    return found


def probe_in_fork(backend: Backend) -> Probe:
    """The probe in a forked child, leaving this process's device untouched."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(read_fd)
            result = probe_here(backend, "forked child")
            os.write(write_fd, json.dumps(asdict(result)).encode() + b"\n")
            if result.usable:
                os.write(write_fd, json.dumps(probe_runtime(backend.device)).encode())
        except BaseException:  # noqa: BLE001 - never run the parent's code in the child
            code = 3
        os._exit(code)
    os.close(write_fd)
    data = _read_with_timeout(read_fd, PROBE_TIMEOUT)
    os.close(read_fd)
    if data is None:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    if data:
        return _parse(data.decode().split("\n"), f"the probe child died ({_status(status)})")
    how = "did not answer in time" if data is None else f"died ({_status(status)})"
    return Probe(False, "forked child", f"the probe child {how}", bad_fork=True)


def probe_in_fresh_process(backend: Backend) -> Probe:
    """The probe in a new interpreter that loads the same backend (as a spawned runner would)."""
    cmd = [*interpreter.python(), "-m", "conformance.engine.probe", backend.spec]
    cmd += [backend.device_type, backend.heap_zones, backend.heap_cache or ""]
    where = f"fresh process ({interpreter.describe()})"
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            env=interpreter.environment(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Probe(False, where, f"no answer within {PROBE_TIMEOUT:.0f} s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines and '"usable"' in lines[0]:
        died = f"the probe process ended with exit code {proc.returncode}"
        return _parse(lines, died)
    tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return Probe(False, where, tail)


def _parse(lines: list[str], died: str) -> Probe:
    """The probe's first line (the core facts) and, if it got that far, its second (the
    runtime's facts)."""
    probe = Probe(**json.loads(lines[0]))
    rest = [ln for ln in lines[1:] if ln.strip()]
    if probe.usable:
        probe.runtime = json.loads(rest[0]) if rest else {"streams": [None, died]}
    return probe


def _read(fn) -> int | None:
    try:
        return int(fn())
    except Exception:  # noqa: BLE001 - a counter that raises is not usable
        return None


def _read_with_timeout(fd: int, timeout: float) -> bytes | None:
    """Everything written to `fd` until EOF (b"" if nothing), or None on timeout."""
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str]) -> int:
    """`python -m conformance.engine.probe MODULE[:FUNCTION] DEVICE [HEAP_ZONES CACHE]`: print
    the probe as one JSON line."""
    module, device, *zones = argv
    backend = load_backend(module, device)
    if zones:
        backend.heap_zones, backend.heap_cache = zones[0], zones[1] or None
    result = probe_here(backend, "fresh process")
    print(json.dumps(asdict(result)), flush=True)
    if result.usable:
        print(json.dumps(probe_runtime(backend.device)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
