"""The order the collected items run in, and the items of the other families a selection drops.

Foundation cases run first, -grad cases after every forward case, the contract cases and the
scenarios (every family's items besides the op cases) last, so that the first failure of a run
names the op that is wrong. --ops/--fallback-ops name the overloads to test: the other families'
items then stay out; with --shard each of them runs in one shard. No state: the hook in
session.py calls it with the run's Suite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from conformance.engine.foundations import ORDER
from conformance.engine.modes import mode_of
from conformance.harness.families import registry
from conformance.harness.nodes import case_of, record_id

if TYPE_CHECKING:
    from conformance.harness.suite import Suite

__all__ = ("order_items",)


def order_items(suite: Suite, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sort `items` in place (foundations, the other forward cases, every -grad case, then the
    other families' items), note what each family's item expects, and deselect the family items
    --ops/--fallback-ops leave out or another shard runs."""
    families = registry()
    owners = {}  # the items of the families besides the op cases -> their family
    for item in items:
        family = families.of_item(item) if case_of(item) is None else None
        if family is not None:
            owners[item] = family

    def rank(item: pytest.Item) -> int:
        case = case_of(item)
        if case is None:
            return 3 if item in owners else 1
        rank = mode_of(case.values).collection_rank  # -grad: after every forward case
        return 0 if rank == 1 and case.overload in ORDER else rank

    # stable: foundations, the other forward cases, every -grad case, then the other families
    items.sort(key=rank)
    family_items = [item for item in items if item in owners]
    if suite.options.names_overloads:
        dropped = family_items
    else:  # --shard: each family item runs in one shard
        keeps = suite.case_list.shard_keeps([record_id(item.nodeid) for item in family_items])
        dropped = [item for item, keep in zip(family_items, keeps, strict=True) if not keep]
    gone = set(dropped)
    for item in family_items:  # what a kept item expects (matching every item: 0.3 s a run)
        if item not in gone:
            owners[item].expect(suite, item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in gone]
