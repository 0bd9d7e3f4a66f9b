"""The narrowest manifest patterns that cover a set of case ids, and no case a run collected
besides them: what the baseline (`baseline.py`) writes in an entry's ``pattern``.

A dimension of a case id (dtype, layout, path, value set) becomes `*` only where every case the
run collected there is covered, checked by matching each pattern against every collected case id
of every context (torch minor, allocator mode); the shortest such list wins. Only the dimensions
a run collected in full may become `*`: elsewhere a fuller run would collect cases the run never
saw.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from conformance.harness.families import registry
from conformance.record import CaseId

__all__ = ("DIMENSIONS", "patterns_for")

#: the dimensions a pattern may generalise (the overload always stays literal)
DIMENSIONS = (1, 2, 3, 4)  # dtype, layout, path, values: indexes into a case id's parts


def _render(parts: Sequence[str]) -> str:
    """A pattern from case-id parts, `*` for a generalised one; `values` "" is the ordinary set
    (no suffix) and "*" any; runs of `*` collapse."""
    overload, dtype, layout, path, values = parts
    text = f"{overload}-{dtype}-{layout}-{path}"
    if values == "*":
        text += "*"
    elif values:
        text += f"-{values}"
    while "*-*" in text:
        text = text.replace("*-*", "*")
    return text.replace("**", "*")


def _parts(case: str) -> list[str]:
    c = CaseId.parse(case)
    return [c.overload, c.dtype, c.layout, c.path, c.values]


def _narrow(
    pattern: str, members: Mapping[Any, set[str]], universes: Mapping[Any, set[str]]
) -> bool:
    """Whether `pattern` matches, in every context, only cases of `members`."""
    for ctx, universe in universes.items():
        own = members.get(ctx, set())
        if any(case not in own and fnmatchcase(case, pattern) for case in universe):
            return False
    return True


def _cover(
    wanted: set[str],
    members: Mapping[Any, set[str]],
    universes: Mapping[Any, set[str]],
    dims: Iterable[int],
) -> list[str]:
    """The shortest list of narrow patterns that matches every case of `wanted` (one overload),
    trying every order in which to generalise the dimensions `dims`."""
    best: list[str] | None = None
    for order in itertools.permutations(sorted(dims)):
        out: list[str] = []
        left = set(wanted)
        for seed in sorted(wanted):
            if seed not in left:
                continue
            parts = _parts(seed)
            for dim in order:
                if dim == 3 and parts[4] == "" and 4 not in dims:
                    # a `*` path would end the pattern and match any value set or mode suffix
                    # too: ones this run did not collect (issue 32)
                    continue
                trial = [*parts[:dim], "*", *parts[dim + 1 :]]
                if _narrow(_render(trial), members, universes):
                    parts = trial
            pattern = _render(parts)
            out.append(pattern)
            left = {c for c in left if not fnmatchcase(c, pattern)}
        if best is None or len(out) < len(best):
            best = out
    return best or []


def patterns_for(
    wanted: set[str],
    members: Mapping[Any, set[str]],
    universes: Mapping[Any, set[str]],
    dims: Iterable[int] = DIMENSIONS,
) -> list[str]:
    """Narrow patterns covering `wanted`, per overload (see `_cover`); only the dimensions
    `dims` may become `*`."""
    by_overload: dict[str, set[str]] = {}
    out = sorted(c for c in wanted if registry().of_key(c) is not None)  # a family's case: as it is
    for case in wanted:
        if registry().of_key(case) is None:
            by_overload.setdefault(CaseId.parse(case).overload, set()).add(case)
    for overload, cases in sorted(by_overload.items()):
        prefix = overload + "-"
        local = {k: {c for c in u if c.startswith(prefix)} for k, u in universes.items()}
        out += _cover(cases, members, local, dims)
    return out
