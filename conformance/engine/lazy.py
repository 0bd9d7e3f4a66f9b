"""The runtime of a lazy device (torch_xla, torch._lazy): its sync point and its own evidence.

A lazy device records ops as a graph and runs it at a sync point; errors, fallbacks and
compilations show only in its runtime's metrics. Both lazy runtimes in torch's reach expose the
same standard surface, used here and nowhere else:

- sync: `torch_xla.sync()` (or `xm.mark_step()`), `torch._lazy.mark_step()`;
- seed: `xm.set_rng_state(seed)` for torch_xla, whose generator `torch.manual_seed` does not
  reach (measured on torch_xla 2.9: 20 seeded draws of `uniform_` compile 20 graphs after
  `torch.manual_seed`, 1 after `xm.set_rng_state`, and repeat bit for bit);
- counters: `counter_names()` / `counter_value(name)` of `torch_xla.debug.metrics` or
  `torch._lazy.metrics`; `aten::<op>` counts every op that fell back to CPU, `UncachedCompile`
  the graphs compiled, `ExecuteComputation` (torch_xla) the graphs executed;
- compile and execute time: `metric_data("CompileTime")` and `metric_data("ExecuteTime")` of
  `torch_xla.debug.metrics` (count, total ns): the time the backend spends compiling graphs and
  running them, told apart from the suite's own time in a case (torch._lazy has no such
  metrics: not measured there).

Which runtime a backend has is read from its dispatch key (`XLA`, `Lazy`), never from a hook.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FALLBACK_PREFIX = "aten::"
COMPILES = "UncachedCompile"
EXECUTIONS = "ExecuteComputation"
COMPILE_TIME = "CompileTime"
EXECUTE_TIME = "ExecuteTime"


@dataclass(frozen=True)
class Counts:
    """The runtime's counters at one moment."""

    values: dict[str, int]

    def fell_back(self, before: Counts) -> list[str]:
        """The ops (aten names) whose CPU-fallback counter moved since `before`."""
        return sorted(
            name.removeprefix(FALLBACK_PREFIX)
            for name, n in self.values.items()
            if name.startswith(FALLBACK_PREFIX) and n > before.values.get(name, 0)
        )

    def moved(self, before: Counts, name: str) -> int | None:
        """How far counter `name` moved since `before` (None: this runtime has no such counter
        and none appeared)."""
        if name not in self.values and name not in before.values:
            return None
        return self.values.get(name, 0) - before.values.get(name, 0)


@dataclass(frozen=True)
class LazyRuntime:
    """One lazy runtime: how to sync and where its counters are."""

    name: str  # "torch_xla" or "torch._lazy", for the run header
    sync_fn: Callable[[], None]
    metrics: Any  # the metrics module: counter_names(), counter_value(name)
    save: Callable[[Any, str], None]  # the runtime's save (xm.save: values moved to CPU first)
    save_name: str
    # the runtime's own seed where torch.manual_seed does not reach its generator (torch_xla:
    # xm.set_rng_state; the seed is then device data, so draws reuse one compiled graph)
    seed: Callable[[int], None] | None = None
    seed_name: str = ""

    def sync(self) -> None:
        """Run every pending graph (the device's sync point)."""
        self.sync_fn()

    def compile_seconds(self) -> float | None:
        """The time the runtime has spent compiling graphs in this process (None: it has no
        such metric)."""
        return self._seconds(COMPILE_TIME)

    def execute_seconds(self) -> float | None:
        """The time the runtime has spent running compiled graphs in this process (None: it has
        no such metric)."""
        return self._seconds(EXECUTE_TIME)

    def _seconds(self, metric: str) -> float | None:
        """A time metric's total in seconds (its data: count, total ns, samples)."""
        data = getattr(self.metrics, "metric_data", None)
        if data is None:
            return None
        try:
            sample = data(metric)
        except Exception:  # noqa: BLE001 - a runtime without the metric
            return None
        return float(sample[1]) / 1e9 if sample else 0.0

    def counts(self) -> Counts:
        m = self.metrics
        return Counts({n: int(m.counter_value(n) or 0) for n in m.counter_names()})

    def describe(self) -> str:
        return (
            f"{self.name}: sync by {self.sync_fn.__module__}.{self.sync_fn.__name__}(), save by "
            f"{self.save_name}; "
            f"per case, ops that fell back to CPU from its '{FALLBACK_PREFIX}<op>' counters, "
            f"compilations from '{COMPILES}'"
            + (
                f", compile and execute time from '{COMPILE_TIME}' and '{EXECUTE_TIME}'"
                if self.compile_seconds() is not None
                else ", compile and execute time not measured (no such metrics)"
            )
        )


def _save_on_cpu(data: Any, path: str) -> None:
    """What `xm.save` does, for a runtime without a save of its own: move every tensor to CPU
    (a sync point), then `torch.save`."""
    import torch
    from torch.utils._pytree import tree_map

    torch.save(tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, data), path)


def runtime_for(dispatch_key: str) -> LazyRuntime | None:
    """The lazy runtime behind a device's dispatch key, or None (an eager device)."""
    try:
        if dispatch_key == "XLA":
            torch_xla = importlib.import_module("torch_xla")
            xm = importlib.import_module("torch_xla.core.xla_model")
            met = importlib.import_module("torch_xla.debug.metrics")
            sync = getattr(torch_xla, "sync", None) or xm.mark_step
            return LazyRuntime(
                "torch_xla", sync, met, xm.save, "xm.save", xm.set_rng_state, "xm.set_rng_state"
            )
        if dispatch_key == "Lazy":
            lazy = importlib.import_module("torch._lazy")
            met = importlib.import_module("torch._lazy.metrics")
            save, name = _save_on_cpu, "torch.save of .cpu()"
            return LazyRuntime("torch._lazy", lazy.mark_step, met, save, name)
    except ImportError:
        return None
    return None
