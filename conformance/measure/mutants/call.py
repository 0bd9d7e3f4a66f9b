"""One call of a mutant kernel: the original kernel, the call's arguments, the outputs a wrong
kernel would write, and the few device operations a mutant makes itself (reading a result back,
writing a changed one, a clone), made with the mutants switched off so a mutant of a copy op
never sees its own work."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.measure.mutants import values
from conformance.measure.mutants.signature import Signature

_STATE = threading.local()


def busy() -> bool:
    """Whether a mutant's own device work is running in this thread (mutants pass through)."""
    return getattr(_STATE, "busy", False)


@contextlib.contextmanager
def own_work() -> Iterator[None]:
    """The mutant's own device operations: every mutant calls its original kernel inside."""
    before = busy()
    _STATE.busy = True
    try:
        yield
    finally:
        _STATE.busy = before


@dataclass
class Call:
    """A call of one mutant kernel."""

    sig: Signature
    original: Callable[..., Any]  # (args, kwargs) -> result, the kernel that was replaced
    args: tuple
    kwargs: dict[str, Any]
    index: int  # 1 for the first call of this overload in this process
    changed: list[str] = field(default_factory=list)  # what the mutant changed, if anything
    # a random op's draws changed less than any law test of them could see (values.law_shift)
    within_law: list[str] = field(default_factory=list)

    def run(self, args: tuple | None = None, kwargs: dict[str, Any] | None = None) -> Any:
        """The original kernel on these arguments (default: the call's own)."""
        return self.original(
            self.args if args is None else args, self.kwargs if kwargs is None else kwargs
        )

    @property
    def bound(self) -> dict[str, Any]:
        return self.sig.bind(self.args, self.kwargs)

    def outputs(self, result: Any) -> list[torch.Tensor]:
        """The tensors the kernel wrote: its written arguments, else what it returned (never a
        view of an input: a view op writes nothing)."""
        if self.sig.written:
            found = [self.bound.get(name) for name in self.sig.written]
        elif self.sig.returns_view:
            return []
        else:
            found = [result]
        return [t for t in _tensors(found) if t.numel() > 0]

    def rewrite(self, t: torch.Tensor, transform: values.Transform, why: str) -> bool:
        """Read `t` back, apply `transform`, write it back where it differs: whether it did. A
        random op's draws changed by less than a law test of them can see (`values.law_shift`
        below `values.LAW_RESOLUTION`) are `within_law`, not `changed`: no check of a law could
        tell the mutant from the original on those draws."""
        with own_work():
            host = t.detach().cpu().contiguous() if t.device.type != "cpu" else t.detach().clone()
            new = transform(host.clone())
            if values.identical(new, host):
                return False
            with torch.no_grad():
                version = version_of(t)
                t.detach().copy_(new.to(t.device))
                set_version(t, version)
            shift = values.law_shift(host, new) if self.sig.draws else math.inf
        if shift < values.LAW_RESOLUTION:
            self.within_law.append(f"{why} (its law moved by D sqrt(n) = {shift:.2g} there)")
        else:
            self.changed.append(why)
        return True

    def written_contents(self) -> dict[int, torch.Tensor]:
        """A CPU copy of each tensor the call writes (by id): what an unwritten one kept."""
        with own_work():
            return {
                id(t): t.detach().cpu().contiguous()
                for name in self.sig.written
                for t in tensors_in(self.bound.get(name))
            }

    def device_clone(self, t: torch.Tensor) -> torch.Tensor:
        with own_work():
            return t.clone()

    def note(self, why: str) -> None:
        """The mutant changed behaviour other than values (a copy, a dtype, memory kept)."""
        self.changed.append(why)


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of an argument: itself, or those of its list."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def version_of(t: torch.Tensor) -> int | None:
    """The tensor's version counter (None: an inference tensor has none)."""
    try:
        return t._version
    except RuntimeError:
        return None


def set_version(t: torch.Tensor, version: int | None) -> None:
    """Put the version counter back (the mutant's own write is not the kernel's)."""
    if version is None:
        return
    setter = torch._C._autograd._unsafe_set_version_counter
    try:
        setter((t,), (version,))
    except TypeError:  # torch < 2.5 takes one tensor
        setter(t, version)


def _tensors(found: list[Any]) -> Iterator[torch.Tensor]:
    for item in found:
        if isinstance(item, torch.Tensor):
            yield item
        elif isinstance(item, list | tuple):
            yield from _tensors(list(item))
