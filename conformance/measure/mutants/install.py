"""Installs the mutants named in `CONFORMANCE_MUTANTS` on the loaded backend: the wrapper that
`CONFORMANCE_BACKEND_WRAPPER=conformance.measure.mutants.install:wrap` names (engine/wrapping.py),
so every process of a run that loads the backend installs the same mutants.

`CONFORMANCE_MUTANTS="abs.out=ulp:4;exp=sign-small"`: overload=operator pairs, one mutant per
overload. Each replaces the overload's kernel at the device's key (or its autograd key: for a
registration operator, and for an overload the backend registers there alone) with a Python
kernel (`torch.library`) that calls the kernel it replaced (`torch.library.get_kernel`, torch >=
2.9) and changes what the operator says. With `CONFORMANCE_MUTANT_LOG=FILE`, the first call of
each mutant in a process and the first change it made (or, for a random op, the first change
within its law) are appended to FILE as JSON lines (how the campaign tells an equivalent,
unobservable or unreached mutant from a survivor). The kernels stay replaced
for the life of the process.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.errors import ConformanceUsageError
from conformance.measure.mutants.call import Call, busy, own_work
from conformance.measure.mutants.operators import OPERATORS, Operator
from conformance.measure.mutants.signature import Signature

MUTANTS_VARIABLE = "CONFORMANCE_MUTANTS"
LOG_VARIABLE = "CONFORMANCE_MUTANT_LOG"
WRAPPER = "conformance.measure.mutants.install:wrap"


def parse(spec: str) -> list[tuple[str, str]]:
    """`"abs=ulp:4;exp=none"` -> [("abs", "ulp:4"), ("exp", "none")], checked."""
    pairs = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        overload, sep, name = part.partition("=")
        if not sep or name not in OPERATORS:
            raise ConformanceUsageError(
                f"{MUTANTS_VARIABLE}: {part!r} is not OVERLOAD=OPERATOR with a known operator "
                f"(python -m conformance.measure.mutants --list)"
            )
        pairs.append((overload.strip(), name))
    overloads = [o for o, _ in pairs]
    if len(set(overloads)) != len(overloads):
        raise ConformanceUsageError(f"{MUTANTS_VARIABLE}: one mutant per overload: {spec}")
    return pairs


@dataclass
class Mutants:
    """The mutants of this process: their kernels' libraries and call counts."""

    key: str
    log: str | None
    libraries: list[Any] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    logged: set[tuple[str, str]] = field(default_factory=set)

    def install(self, overload: str, op: Operator) -> None:
        sig = Signature.of(overload)
        qualified = f"aten::{overload}"
        # the kernel it wraps: at the device's key, or (a vendor's kernel registered there
        # alone, as torch_npu's dropout) at its autograd key
        home = next(
            (k for k in (self.key, f"Autograd{self.key}") if _has_kernel(qualified, k)), None
        )
        if home is None:
            raise ConformanceUsageError(
                f"{MUTANTS_VARIABLE}: the backend registers no kernel for {overload} at "
                f"{self.key} or Autograd{self.key}"
            )
        key = f"{op.key}{self.key}" if op.key else home
        original = torch.library.get_kernel(qualified, key)
        name = f"{overload}={op.name}"

        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            def call_original(a: tuple, kw: dict) -> Any:
                a, kw, cast = sig.rewrapped(a, kw)
                result = original.call_boxed(keyset, *a, **kw)
                if (
                    cast is not None
                    and sig.kind == "functional"
                    and isinstance(result, torch.Tensor)
                ):
                    with own_work():
                        return result.to(cast)
                return result

            if busy():
                return call_original(args, kwargs)
            self.calls[name] = index = self.calls.get(name, 0) + 1
            self._log(name, "called")
            call = Call(sig, call_original, args, kwargs, index)
            result = op.run(call)
            if call.changed:
                self._log(name, "changed", call.changed[0])
            elif call.within_law:
                self._log(name, "within-law", call.within_law[0])
            return result

        library = torch.library.Library("aten", "IMPL", key)
        library.impl(overload, kernel, with_keyset=True)
        self.libraries.append(library)

    def _log(self, name: str, event: str, what: str = "") -> None:
        if self.log is None or (name, event) in self.logged:
            return
        self.logged.add((name, event))
        line = json.dumps({"mutant": name, "event": event, "what": what, "pid": os.getpid()})
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


def _has_kernel(qualified: str, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key))
    except RuntimeError:  # no such dispatch key in this torch
        return False


INSTALLED: list[Mutants] = []  # kept alive: a library that is collected deregisters its kernels


def wrap(backend: Any) -> None:
    """Install the mutants `CONFORMANCE_MUTANTS` names on the backend's dispatch key."""
    if not hasattr(torch.library, "get_kernel"):
        raise ConformanceUsageError(
            f"mutants call the kernel they replace through torch.library.get_kernel, which torch "
            f"{torch.__version__} lacks (torch >= 2.9)"
        )
    mutants = Mutants(backend.dispatch_key, os.environ.get(LOG_VARIABLE) or None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        for overload, name in parse(os.environ.get(MUTANTS_VARIABLE, "")):
            mutants.install(overload, OPERATORS[name])
    INSTALLED.append(mutants)
