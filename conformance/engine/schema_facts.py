"""What the per-sample checks read of an overload's schema, worked out once per schema.

Each read of `schema.returns` or `schema.arguments` builds new argument objects, and the checks
ask several times a sample; a schema is not always hashable (a default of type `List[int]`), so
facts are kept by the schema object's identity, with the schema itself kept alive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class SchemaFacts:
    """Facts (functions of a schema) kept per schema object."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, Callable[[Any], Any]], tuple[Any, Any]] = {}

    def get(self, schema: Any, fact: Callable[[Any], Any]) -> Any:
        key = (id(schema), fact)
        kept = self._kept.get(key)
        if kept is None or kept[0] is not schema:
            kept = self._kept[key] = (schema, fact(schema))
        return kept[1]


FACTS = SchemaFacts()


def _return_aliases(schema: Any) -> tuple[Any, ...]:
    return tuple(ret.alias_info for ret in schema.returns)


def _declared_writes(schema: Any) -> frozenset[str]:
    return frozenset(a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write)


def return_aliases(schema: Any) -> tuple[Any, ...]:
    """The alias info of each of the schema's returns (None where a return aliases nothing)."""
    return FACTS.get(schema, _return_aliases)


def _returns_views(schema: Any) -> bool:
    return any(info is not None and not info.is_write for info in return_aliases(schema))


def _returns_written(schema: Any) -> bool:
    return any(info is not None and info.is_write for info in return_aliases(schema))


def returns_views(schema: Any) -> bool:
    """Whether a return of the schema is a view of an argument (aliased, not written)."""
    return FACTS.get(schema, _returns_views)


def returns_written(schema: Any) -> bool:
    """Whether a return of the schema is a tensor the overload wrote (in-place, out=)."""
    return FACTS.get(schema, _returns_written)


def declared_writes(schema: Any) -> frozenset[str]:
    """The arguments the schema marks written (`Tensor(a!)`)."""
    return FACTS.get(schema, _declared_writes)
