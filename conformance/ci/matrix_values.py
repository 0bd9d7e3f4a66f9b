"""One value of a matrix file, read and checked: the readers every table's validation shares.

Each takes the value (or the table holding it) and ``where`` (the file, the table and the key, as
the message names them) and raises :class:`~conformance.ci.matrix_spec.MatrixError` with one
line that says what was expected: a table, known keys, a non-empty string, a list of strings, a
table of environment variables or the name of one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from conformance.ci.matrix_spec import MatrixError

__all__ = [
    "check_keys",
    "env_name",
    "env_table",
    "nonempty_str",
    "opt_list",
    "required_table",
    "str_list",
]

ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def required_table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """The table ``data[key]``, which must be there."""
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise MatrixError(f"{where}: missing table [{key}]")
    return value


def check_keys(data: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """Refuse a key of ``data`` that ``allowed`` does not list."""
    allowed = list(allowed)
    for key in data:
        if key not in allowed:
            raise MatrixError(
                f"{where}: unknown key '{key}' (expected one of: {', '.join(allowed)})"
            )


def nonempty_str(value: Any, where: str) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise MatrixError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def str_list(value: Any, where: str) -> tuple[str, ...]:
    """A string or a non-empty list of non-empty strings, as a tuple."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise MatrixError(f"{where}: expected a string or a non-empty list of strings")
    return tuple(nonempty_str(v, where) for v in value)


def env_table(value: Any, where: str) -> dict[str, str]:
    """A table of environment variables and their string values ({} when absent)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MatrixError(f'{where}: expected a table of strings, e.g. {{ NAME = "value" }}')
    out = {}
    for key, val in value.items():
        if not ENV_RE.match(str(key)):
            raise MatrixError(f"{where}: '{key}' is not an environment variable name")
        if not isinstance(val, str):
            raise MatrixError(f'{where}.{key}: expected a string, e.g. {key} = "{val}"')
        out[str(key)] = val
    return out


def opt_list(value: Any, where: str) -> tuple[str, ...]:
    """An optional list of non-empty strings (() when absent)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise MatrixError(f'{where}: expected a list of strings, e.g. ["a", "b"]')
    return tuple(value)


def env_name(value: Any, where: str) -> str | None:
    """An optional environment variable name (None when absent)."""
    if value is None:
        return None
    name = nonempty_str(value, where)
    if not ENV_RE.match(name):
        raise MatrixError(f"{where}: '{name}' is not an environment variable name")
    return name
