"""Which op of a failed module case diverged first: the device's step runs again (a fresh build,
the same seeds) under a dispatch mode that runs each aten op that touches the device a second
time on CPU, on the values its device inputs held before the call, and compares what came out:
its outputs, and every tensor argument after the call (an op that updates an argument its schema
does not mark as written, as `native_batch_norm` does with the running statistics, is caught
too). Each op is judged at the tolerance its own op case uses (its spec's `tol_scale` on its
dtype's base tolerance), so the op a module case names is the op whose op case would fail.
Random and uninitialised ops are run, not compared. The ops the backend registered at its
autograd key (`lstm`, a vendor's fused ops: engine/discovery.py) run above any dispatch mode:
a function mode runs each of them on CPU too, after the ops they call were compared, so a
kernel there is named when none of its parts is.

It runs after the case's verdict, only on a failed case, in a child process (`SearchChild`:
`python -m conformance.engine.modules --serve`, one per process, started again after it crashed
or hung), so a crash or a hang of the search (a dispatch mode over a lazy device's tensors can
bring the process down) is reported as the search's, never as the case's verdict. Every failed
case is searched, so one broken kernel is one finding over all the cases it breaks.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.compare import ErrorStats, Mismatch, Scale, compare_values
from conformance.engine.modules.step import Prepared, run_step
from conformance.engine.oracles import is_nondeterministic
from conformance.engine.transfer import read_back
from conformance.engine.workload_calls import UNINITIALIZED
from conformance.processes import launch, messages
from conformance.processes.messages import MessageReader

SEARCH_TIMEOUT = 120.0  # seconds a search has (the child's start included)


def encode_scales(scales: Mapping[str, Scale]) -> str:
    """The op specs' tolerance scales ({overload: tol_scale}) as JSON, for the search child (a
    multiplier is a number or [rtol, atol]; a per-dtype scale an object by dtype name)."""

    def plain(scale: Scale) -> Any:
        if isinstance(scale, Mapping):
            return {str(d).removeprefix("torch."): plain(m) for d, m in scale.items()}
        return list(scale) if isinstance(scale, tuple) else float(scale)

    return json.dumps({o: plain(s) for o, s in scales.items()})


def decode_scales(text: str) -> dict[str, Scale]:
    """`encode_scales`' JSON back ({} for "")."""

    def scale(value: Any) -> Any:
        if isinstance(value, dict):
            return {getattr(torch, d): scale(m) for d, m in value.items()}
        return tuple(value) if isinstance(value, list) else float(value)

    return {o: scale(v) for o, v in (json.loads(text) if text else {}).items()}


class FirstDivergence(TorchDispatchMode):
    """Runs each device op on CPU too and keeps the first that differs (`found`)."""

    def __init__(self, device_type: str, scales: Mapping[str, Scale] | None = None) -> None:
        super().__init__()
        self.device_type = device_type
        self.scales = scales or {}  # the op specs' tol_scale by overload (others: 1)
        self.found: str | None = None

    def scale(self, name: str) -> Scale:
        """The tolerance scale the op case of `name` ("aten.native_batch_norm.default",
        "lstm") uses: its spec's `tol_scale`."""
        overload = name.removeprefix("aten.").removesuffix(".default")
        return self.scales.get(overload, 1.0)

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
        found = self.first_difference(_named_values(func, got, want), self.scale(str(func)))
        return f"{func}: {found}" if found is not None else None

    @staticmethod
    def first_difference(values: Any, scale: Scale) -> str | None:
        """What the first (name, device value, CPU value) whose tensors differ says (dtype or
        shape, else values beyond the tolerance under `scale`), None if none does."""
        for name, d, c in values:
            if not (isinstance(d, torch.Tensor) and isinstance(c, torch.Tensor)):
                continue
            if d.shape != c.shape or d.dtype != c.dtype:
                return f"{name} is {d.dtype} {list(d.shape)}, CPU's {c.dtype} {list(c.shape)}"
            try:
                compare_values(name, read_back(d.detach()), c, scale, ErrorStats())
            except Mismatch as exc:
                return exc.message
        return None


class KernelsAboveDispatch(TorchFunctionMode):
    """Runs each call of a function the backend has a kernel for at its autograd key on CPU
    too (on the values its device inputs held) and hands a difference to `divergence`, the
    dispatch mode's search (its first op found stands: the parts are more specific)."""

    def __init__(self, names: set[str], divergence: FirstDivergence) -> None:
        super().__init__()
        self.names, self.divergence = names, divergence

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        search = self.divergence
        if name not in self.names or search.found is not None:
            return func(*args, **kwargs)
        if not any(search._on_device(t) for t in tree_flatten((args, kwargs))[0]):
            return func(*args, **kwargs)
        cpu_args, cpu_kwargs = tree_map(search._to_cpu, (args, kwargs))
        out = func(*args, **kwargs)
        if search.found is not None:
            return out
        try:
            with torch.no_grad():
                expected = func(*cpu_args, **cpu_kwargs)
        except Exception:  # noqa: BLE001 - CPU refuses these inputs: nothing to compare
            return out
        pairs = zip(tree_flatten(out)[0], tree_flatten(expected)[0], strict=False)
        outputs = [(f"output {i}", d, c) for i, (d, c) in enumerate(pairs)]
        found = search.first_difference(outputs, search.scale(name))
        if found is not None:
            search.found = f"{name} (its kernel at the autograd key): {found}"
        return out


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


def first_divergence(
    prepared: Prepared,
    device: torch.device | str,
    seeds: list,
    above: set[str] = frozenset(),
    scales: Mapping[str, Scale] | None = None,
) -> str | None:
    """The first op of the case's device step whose result differs from CPU's on the same
    inputs ("aten.native_batch_norm.default: running_var after the call: 3/3 elements differ
    ..."), None if none does or the search failed. `above`: the base names of the ops the
    backend registered at its autograd key that draw no random numbers (compared at the
    function level too); `scales`: the op specs' tolerance scales."""
    mode = FirstDivergence(torch.device(device).type, scales)
    try:
        with KernelsAboveDispatch(set(above), mode), mode:
            run_step(prepared, device, seeds)
    except Exception:  # noqa: BLE001 - a diagnostic: what it found before stands
        pass
    return mode.found


class SearchChild:
    """This process's search child (`python -m conformance.engine.modules --serve`): a `search`
    message in, a `diverged` message out (processes/messages.py); started at the first search,
    started again after it crashed or hung (that search is reported as the search's failure,
    never as the case's)."""

    def __init__(
        self,
        backend: str,
        device: str,
        scales: Mapping[str, Scale] | None = None,
        cache_dir: str | None = None,
    ):
        self.backend, self.device = backend, device
        self.scales = dict(scales or {})  # the op specs' tol_scale (harness: op_scales())
        self.cache_dir = cache_dir  # the sample cache, where the modules' samples are kept
        self.proc: subprocess.Popen | None = None
        self.answers: MessageReader | None = None
        self.stderr: Any = None  # a file: a pipe nobody reads would block a chatty child

    def search(self, case: str) -> str | None:
        """The first op that diverged in `case`; "not found: ..." when the search failed; None
        when it found none."""
        if self.proc is not None and self.proc.poll() is not None:
            self._drop()  # it ended between searches: its pipes closed before a new child's
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None and self.answers is not None
        try:
            messages.say(self.proc.stdin.fileno(), "search", case=case)
        except OSError:
            return self._ended()
        try:
            answer = self.answers.receive(SEARCH_TIMEOUT)
        except TimeoutError:
            self.close()
            return f"not found: the search did not finish in {SEARCH_TIMEOUT:g} s"
        if answer is None:  # the child's output ended: it did
            return self._ended()
        return messages.dispatch(self, answer)

    def on_diverged(self, op: str | None) -> str | None:
        return op

    def _start(self) -> None:
        cmd = ["-m", "conformance.engine.modules", "--serve"]
        cmd += ["--backend", self.backend] if self.backend else []
        cmd += ["--scales", encode_scales(self.scales)] if self.scales else []
        cmd += ["--cache-dir", self.cache_dir] if self.cache_dir else []
        self.stderr = tempfile.TemporaryFile()
        self.proc = launch.spawn(
            "divergence-search",
            [*cmd, "--device", self.device],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
        )
        assert self.proc.stdout is not None
        self.answers = MessageReader(self.proc.stdout.fileno())

    def _ended(self) -> str:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=SEARCH_TIMEOUT)
        except subprocess.TimeoutExpired:  # its output closed, the process lingers
            self.proc.kill()
            code = self.proc.wait()
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace")
        last = (err.strip().splitlines() or [""])[-1][:160]
        self._drop()
        how = signal.Signals(-code).name if code < 0 else str(code)
        return f"not found: the search's process ended with {how}" + (f" ({last})" if last else "")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self._drop()

    def _drop(self) -> None:
        """Forget the ended child, its pipes closed."""
        assert self.proc is not None
        for pipe in (self.proc.stdin, self.proc.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        self.proc, self.answers, self.stderr = None, None, None
