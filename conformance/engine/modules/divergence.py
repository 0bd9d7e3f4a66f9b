"""Which op of a failed module case diverged first: the device's step runs again (a fresh build,
the same seeds) under a dispatch mode that runs each aten op that touches the device a second
time on CPU, on the values its device inputs held before the call, and compares what came out:
its outputs, and every tensor argument after the call (an op that updates an argument its schema
does not mark as written, as `native_batch_norm` does with the running statistics, is caught
too). The first op whose result differs beyond `OP_SCALE` times its dtype's base tolerance is
named. Random and uninitialised ops are run, not compared.

It runs after the case's verdict, only on a failed case, and in a child process of its own
(`search_in_child`: `python -m conformance.engine.modules <case> --diverged`), so a crash or a
hang of the search (a dispatch mode over a lazy device's tensors can bring the process down) is
reported as the search's, never as the case's verdict; at most `SEARCHES` per process.
"""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import interpreter
from conformance.engine.compare import ErrorStats, Mismatch, compare_values
from conformance.engine.modules.step import Prepared, run_step
from conformance.engine.oracles import is_nondeterministic
from conformance.engine.transfer import read_back
from conformance.engine.workload_calls import UNINITIALIZED

SEARCHES = 16  # searches a process makes (each a child: import torch, the backend, module_db)
SEARCH_TIMEOUT = 120.0  # seconds a search has
OP_SCALE = 8.0  # one op against CPU on the same inputs: its dtype's base tolerance, times this


class FirstDivergence(TorchDispatchMode):
    """Runs each device op on CPU too and keeps the first that differs (`found`)."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self.device_type = device_type
        self.found: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.found is not None or not self._compared(func, args, kwargs):
            return func(*args, **kwargs)
        cpu_args, cpu_kwargs = tree_map(self._to_cpu, (args, kwargs))
        out = func(*args, **kwargs)
        try:
            expected = func(*cpu_args, **cpu_kwargs)
        except Exception:  # noqa: BLE001 - CPU refuses these inputs: nothing to compare
            return out
        self.found = self._difference(func, (out, args, kwargs), (expected, cpu_args, cpu_kwargs))
        return out

    def _compared(self, func: Any, args: Any, kwargs: Any) -> bool:
        """A device op with values to compare: not a random draw (oracles.py, as the op cases
        tell them) nor uninitialised memory (workload_calls.UNINITIALIZED)."""
        if func.__name__.split(".")[0] in UNINITIALIZED or is_nondeterministic(func):
            return False
        return any(self._on_device(t) for t in tree_flatten((args, kwargs))[0])

    def _on_device(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type == self.device_type

    def _to_cpu(self, value: Any) -> Any:
        if self._on_device(value):
            return read_back(value.detach()).clone()
        if isinstance(value, torch.device) and value.type == self.device_type:
            return torch.device("cpu")
        return value

    def _difference(self, func: Any, got: Any, want: Any) -> str | None:
        for name, d, c in _named_values(func, got, want):
            if not (isinstance(d, torch.Tensor) and isinstance(c, torch.Tensor)):
                continue
            if d.shape != c.shape or d.dtype != c.dtype:
                return (
                    f"{func}: {name} is {d.dtype} {list(d.shape)}, CPU's {c.dtype} {list(c.shape)}"
                )
            try:
                compare_values(name, read_back(d.detach()), c, OP_SCALE, ErrorStats())
            except Mismatch as exc:
                return f"{func}: {exc.message}"
        return None


def _named_values(func: Any, got: Any, want: Any) -> list[tuple[str, Any, Any]]:
    """(name, device value, CPU value) of an op's outputs ("output 0") and, after the call, of
    its tensor arguments (by schema name: "running_var after the call")."""
    (out, args, kwargs), (expected, cpu_args, cpu_kwargs) = got, want
    outs, cpu_outs = tree_flatten(out)[0], tree_flatten(expected)[0]
    found = [(f"output {i}", d, c) for i, (d, c) in enumerate(zip(outs, cpu_outs, strict=False))]
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            pair = (args[i], cpu_args[i])
        elif arg.name in kwargs:
            pair = (kwargs[arg.name], cpu_kwargs[arg.name])
        else:
            continue
        devs, cpus = tree_flatten(pair[0])[0], tree_flatten(pair[1])[0]
        for j, (d, c) in enumerate(zip(devs, cpus, strict=False)):
            suffix = f"[{j}]" if len(devs) > 1 else ""
            found.append((f"{arg.name}{suffix} after the call", d, c))
    return found


def first_divergence(prepared: Prepared, device: torch.device | str, seeds: list) -> str | None:
    """The first op of the case's device step whose result differs from CPU's on the same
    inputs ("aten.native_batch_norm.default: running_var after the call: 3/3 elements differ
    ..."), None if none does or the search failed."""
    mode = FirstDivergence(torch.device(device).type)
    try:
        with mode:
            run_step(prepared, device, seeds)
    except Exception:  # noqa: BLE001 - a diagnostic: what it found before stands
        pass
    return mode.found


class ChildSearches:
    """The searches of one process, each in a child process (their number capped)."""

    def __init__(self, limit: int = SEARCHES) -> None:
        self.left = limit

    def search(self, case: str, backend: str, device: str) -> str | None:
        """The first op that diverged in the case `case`, found by a child that loads the
        backend `backend` (Backend.spec) on `device`; what went wrong with the search when it
        did (a crash, a hang), prefixed "not found:"; None when it found none."""
        if self.left <= 0:
            return f"not searched: {SEARCHES} searches were made in this process"
        self.left -= 1
        cmd = [*interpreter.python(), "-m", "conformance.engine.modules", case, "--diverged"]
        cmd += ["--backend", backend, "--device", device] if backend else ["--device", device]
        try:
            done = subprocess.run(
                cmd,
                env=interpreter.environment(),
                capture_output=True,
                text=True,
                timeout=SEARCH_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return f"not found: the search did not finish in {SEARCH_TIMEOUT:g} s"
        lines = [line for line in done.stdout.splitlines() if line.startswith('{"diverged"')]
        if done.returncode != 0 or not lines:
            last = (done.stderr.strip().splitlines() or [""])[-1][:160]
            how = str(done.returncode)
            if done.returncode < 0:
                how = signal.Signals(-done.returncode).name
            return f"not found: the search's process ended with {how}" + (
                f" ({last})" if last else ""
            )
        return json.loads(lines[-1])["diverged"]
