"""Apply a `-k` expression to case ids before pytest builds items for them.

`pytest conformance -k masked_fill` used to create all ~15,000 case items (op cases and every
family's) only to deselect all but a few hundred. When the expression cannot be made true by a
name it does not contain (no `not`: only `and`, `or`, parentheses and names), a case is dropped at
generation time if the expression is false for every name pytest would match it against, or more
(its test name and id, the module, the packages, the function's attributes and any marker).
Anything else is left to pytest's own -k. Dropped cases are not counted as "deselected".

The op cases use `keyword_filter` (harness/cases.py: the coverage accounts ask it too); a
family's generated test uses `kept_params` in its `pytest_generate_tests`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from conformance.record import TEST_NAME

# marker names an item may carry that its definition does not (a superset is safe)
MARK_NAMES = ("skip", "xfail", "parametrize", "skipif", "usefixtures", "filterwarnings")
# names besides "test_matches_cpu[<id>]" that -k may see on an op case's item
ITEM_NAMES = ("test_conformance.py", "conformance", *MARK_NAMES)
# what separates the parts of a case id and closes it in its test name
SPANS = frozenset("-[]")


class KeywordFilter:
    """pytest's `-k expression` as a predicate on the ids of `test`'s parameters (and the names
    of a parameter's own marks) that keeps every one pytest would keep, given the other `names`
    its items have (a superset is safe). `keyword_filter` builds one."""

    def __init__(self, compiled: Any, names: Iterable[str], test: str) -> None:
        self.compiled = compiled
        self.test = test
        self.fixed = [n.lower() for n in (test, *names)]
        self._in_fixed: dict[str, bool] = {}  # a name -> whether the names every item has match

    def _fixed(self, sub: str) -> bool:
        if sub not in self._in_fixed:
            self._in_fixed[sub] = any(sub in name for name in self.fixed)
        return self._in_fixed[sub]

    def _evaluate(self, matches: Callable[[str], bool]) -> bool:
        def matcher(sub: str, /, **kwargs: object) -> bool:
            if kwargs:
                raise ValueError("call syntax")
            sub = sub.lower()
            return matches(sub) or self._fixed(sub)

        try:
            return self.compiled.evaluate(matcher)
        except Exception:
            return True

    def __call__(self, param_id: str, marks: Iterable[str] = ()) -> bool:
        own = [f"{self.test}[{param_id}]".lower(), *(m.lower() for m in marks)]
        return self._evaluate(lambda sub: any(sub in name for name in own))

    def may_keep(self, first: str, words: Iterable[str]) -> bool:
        """Whether an id `<first>-<word>-<word>...` made of `words` after its first part could
        be kept (False: none is, whatever the words; asked before building the ids). The
        expression has no `not`, so a name it is true for only makes it truer: a name that
        spans a `-` or a bracket may match any id, one without them only within one part."""
        parts = [first.lower(), *(w.lower() for w in words)]
        return self._evaluate(lambda sub: bool(SPANS & set(sub)) or any(sub in p for p in parts))


def keyword_filter(
    expression: str | None, names: Iterable[str] = ITEM_NAMES, test: str = TEST_NAME
) -> KeywordFilter | None:
    """The `KeywordFilter` of pytest's `-k expression`; None when the expression is empty, uses
    `not`, or is not understood (then pytest's own -k decides alone)."""
    if not expression or re.search(r"\bnot\b", expression):
        return None
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expression)
    except Exception:  # pytest's private API moved or the expression is malformed: pytest says
        return None
    return KeywordFilter(compiled, names, test)


def item_names(metafunc: pytest.Metafunc) -> list[str]:
    """Every name -k may match on an item of `metafunc`'s test but its own `name[id]`: the
    module, class and package nodes above it, the function's attributes and its markers."""
    definition = metafunc.definition
    names = [node.name for node in definition.listchain() if not isinstance(node, pytest.Session)]
    names += list(getattr(metafunc.function, "__dict__", {}))
    names += [mark.name for mark in definition.iter_markers()]
    return [*names, *MARK_NAMES]


def kept_params(metafunc: pytest.Metafunc, params: Sequence) -> list:
    """The `pytest.param`s of a family's generated test that `-k` could keep (all of them
    without -k): pytest builds no item for the rest. A family whose params are all dropped gets
    pytest's one `[NOTSET]` item, which `families.base.deselect_empty_parameter_set` removes."""
    expression = metafunc.config.getoption("keyword", None)
    keep = keyword_filter(expression, item_names(metafunc), metafunc.function.__name__)
    if keep is None:
        return list(params)
    return [p for p in params if keep(str(p.id), [mark.name for mark in p.marks])]
