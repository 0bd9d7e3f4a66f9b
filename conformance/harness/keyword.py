"""Apply a `-k` expression to case ids before pytest builds items for them.

`pytest conformance -k masked_fill` used to create all ~10,000 case items only to deselect all
but a few hundred. When the expression cannot be made true by a name it does not contain (no
`not`: only `and`, `or`, parentheses and names), a case is dropped at generation time if the
expression is false for every name pytest would match it against, or more (its test name and
id, the module, the package and any marker). Anything else is left to pytest's own -k.
Dropped cases are not counted as "deselected".
"""

from __future__ import annotations

import re
from collections.abc import Callable

from conformance.record import TEST_NAME

# names besides "test_matches_cpu[<id>]" that -k may see on a case item (a superset is safe)
ITEM_NAMES = (TEST_NAME, "test_conformance.py", "conformance", "skip", "xfail", "parametrize")


def keyword_filter(expression: str | None) -> Callable[[str], bool] | None:
    """A predicate on case ids that keeps every case pytest's `-k expression` would keep, or
    None when the expression is empty, uses `not`, or is not understood."""
    if not expression or re.search(r"\bnot\b", expression):
        return None
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expression)
    except Exception:  # pytest's private API moved or the expression is malformed: pytest says
        return None

    fixed = [n.lower() for n in ITEM_NAMES]
    in_fixed: dict[str, bool] = {}  # a name -> whether the names every case has match it

    def keep(case_id: str) -> bool:
        own = f"{TEST_NAME}[{case_id}]".lower()

        def matcher(sub: str, /, **kwargs: object) -> bool:
            if kwargs:
                raise ValueError("call syntax")
            sub = sub.lower()
            if sub in own:
                return True
            if sub not in in_fixed:
                in_fixed[sub] = any(sub in name for name in fixed)
            return in_fixed[sub]

        try:
            return compiled.evaluate(matcher)
        except Exception:
            return True

    return keep
