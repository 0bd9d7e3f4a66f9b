"""The value sets: samples beyond an overload's ordinary ones, each a set of cases of its own
(case ids end in `-<name>`, contiguous layout), registered here in one table.

- `special`: NaN, +-inf, -0.0, subnormals, dtype extremes (OpInfo's reference inputs, else
  the ordinary samples refilled: values.py);
- `promotion`: an operand of another dtype (OpInfo's reference inputs, else the ordinary
  samples re-typed: values.py);
- `reference`: OpInfo's ordinary reference inputs unlike any of its sample_inputs (the
  shapes, broadcasts and argument values PyTorch's own reference tests use: `alpha=-3.125`),
  where the overload has them;
- `arguments`: the value classes of every schema argument the ordinary samples miss
  (reduction none/mean/sum, optional tensors present and absent, both bools, negative and
  several dims, ignore_index hit and missed, ...), each an ordinary sample with one argument
  changed, kept where CPU accepts it (arguments.py);
- `sizes`: extents that cross tile, vector and accumulation boundaries (1 to 65,537 reduced
  elements, 7 to 4,097 pointwise ones), an ordinary sample grown along its reduced, scanned or
  contracted dimension (sizes.py);
- `models`: the shapes, dtypes and arguments the representative models call the overload
  with, recorded with the workload lists (models.py).

A set's `applies(overload, dtype)` answers from the schema and cheap facts only (collection stays
cheap); its `build(overload, dtype, ordinary, choice)` makes the calls (the run caches them on
disk, samples/__init__.py). `kernels_only`: the set tests the device's own kernels, so it runs on
the native path only (through the boxed fallback CPU's kernel computes: its copies are tested by
`_copy_from`'s own sizes cases).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.engine.calls import Call
from conformance.ops import spec_for


@dataclass(frozen=True)
class ValueSet:
    name: str
    applies: Callable[[str, torch.dtype], bool]
    # (overload, dtype, ordinary calls, choice) -> calls; `choice` is the set's option (--sizes)
    build: Callable[[str, torch.dtype, list[Call], str], list[Call]]
    from_opinfo: bool = False  # OpInfo's reference inputs hold samples of this set too
    kernels_only: bool = False  # the native path only
    cached: bool = True  # built calls are kept on disk (building runs CPU in a forked child)
    limit: int = 6  # calls per case


@functools.cache
def _table() -> dict[str, ValueSet]:
    from conformance.samples import arguments, sizes, values

    sets = [
        ValueSet(
            "special",
            lambda o, d: values.applies(o, d, "special"),
            lambda o, d, calls, _: values.special_calls(calls, d),
            from_opinfo=True,
        ),
        ValueSet(
            "promotion",
            lambda o, d: values.applies(o, d, "promotion"),
            lambda o, d, calls, _: values.promotion_calls(calls, d),
            from_opinfo=True,
        ),
        ValueSet(
            "reference",
            lambda o, d: values.applies(o, d, "reference"),
            lambda o, d, calls, _: [],  # OpInfo's own only: nothing is generated
            from_opinfo=True,
            cached=False,
        ),
        ValueSet(
            "arguments",
            arguments.applies,
            lambda o, d, calls, _: arguments.derived_calls(o, d, calls),
            limit=arguments.MAX_DERIVED,
        ),
        ValueSet(
            "sizes",
            sizes.applies,
            lambda o, d, calls, choice: sizes.sized_calls(o, d, calls, choice),
            kernels_only=True,
            limit=sizes.MAX_SIZED,
        ),
        ValueSet(
            "models",
            lambda o, d: _models().serves(o, d),
            lambda o, d, calls, _: _models().model_calls(o, d, calls),
            cached=False,  # read from the recorded file: nothing to run first
            limit=4,  # models.MAX_MODEL_CALLS
        ),
    ]
    return {s.name: s for s in sets}


def _models():
    from conformance.samples import models

    return models


def value_set(name: str) -> ValueSet:
    """The set called `name` (KeyError naming the valid ones)."""
    table = _table()
    if name not in table:
        raise KeyError(f"unknown value set {name!r}; valid: {', '.join(table)}")
    return table[name]


def names() -> list[str]:
    return list(_table())


@functools.cache
def runs(overload: str, dtype: torch.dtype, name: str) -> bool:
    """Whether (overload, dtype) gets samples of the value set: its op spec compares values and
    allows the set, and the set can say something about it (`applies`). Asked for every case
    id a process builds (the -k filter, the items, the stale check), answered once."""
    spec = spec_for(overload)
    if not spec.check_values or (spec.value_sets is not None and name not in spec.value_sets):
        return False
    return value_set(name).applies(overload, dtype)
