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

import pytest

from conformance.record import TEST_NAME

# marker names an item may carry that its definition does not (a superset is safe)
MARK_NAMES = ("skip", "xfail", "parametrize", "skipif", "usefixtures", "filterwarnings")
# names besides "test_matches_cpu[<id>]" that -k may see on an op case's item
ITEM_NAMES = ("test_conformance.py", "conformance", *MARK_NAMES)


def keyword_filter(
    expression: str | None, names: Iterable[str] = ITEM_NAMES, test: str = TEST_NAME
) -> Callable[..., bool] | None:
    """A predicate on the ids of `test`'s parameters (and the names of a parameter's own marks)
    that keeps every one pytest's `-k expression` would keep, given the other `names` its items
    have (a superset is safe); None when the expression is empty, uses `not`, or is not
    understood."""
    if not expression or re.search(r"\bnot\b", expression):
        return None
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expression)
    except Exception:  # pytest's private API moved or the expression is malformed: pytest says
        return None

    fixed = [n.lower() for n in (test, *names)]
    in_fixed: dict[str, bool] = {}  # a name -> whether the names every item has match it

    def keep(param_id: str, marks: Iterable[str] = ()) -> bool:
        own = [f"{test}[{param_id}]".lower(), *(m.lower() for m in marks)]

        def matcher(sub: str, /, **kwargs: object) -> bool:
            if kwargs:
                raise ValueError("call syntax")
            sub = sub.lower()
            if any(sub in name for name in own):
                return True
            if sub not in in_fixed:
                in_fixed[sub] = any(sub in name for name in fixed)
            return in_fixed[sub]

        try:
            return compiled.evaluate(matcher)
        except Exception:
            return True

    return keep


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
