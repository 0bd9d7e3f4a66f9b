"""A small evaluator of GitHub Actions expressions (``${{ ... }}``), for the local rehearsal.

Supported: literals (``'text'``, numbers, ``true``, ``false``, ``null``), context paths
(``matrix.session``, ``needs.sessions.outputs.sessions``, ``steps.x.outputs['y']``), ``!``, ``==``,
``!=``, ``<``, ``<=``, ``>``, ``>=``, ``&&``, ``||``, parentheses, and the functions ``always``,
``success``, ``failure``, ``cancelled``, ``fromJSON``, ``toJSON``, ``contains``, ``startsWith``,
``endsWith``, ``format`` and ``join``. Anything else raises :class:`ExpressionError`: a workflow the
rehearsal cannot evaluate faithfully fails loudly instead of being guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ExpressionError", "condition", "evaluate", "interpolate", "to_text", "truthy"]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|"
    r"(?P<op>==|!=|<=|>=|&&|\|\||[!<>()\[\].,])|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
_INTERPOLATION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
# a string that is one expression: `${{ a }}-${{ b }}` is two, not one from `a` to `b`
_WHOLE = re.compile(r"\$\{\{((?:(?!\}\}).)*)\}\}", re.DOTALL)
STATUS_FUNCTIONS = ("always(", "success(", "failure(", "cancelled(")


class ExpressionError(ValueError):
    """An expression outside the supported subset, or malformed."""


def truthy(value: Any) -> bool:
    """GitHub's truthiness: false, 0, '', null are false; everything else is true."""
    if value is None or value is False or value == "":
        return False
    return not (isinstance(value, int | float) and not isinstance(value, bool) and value == 0)


def to_text(value: Any) -> str:
    """How a value is interpolated into a string."""
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _lookup(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        if name in obj:
            return obj[name]
        lowered = {str(k).lower(): v for k, v in obj.items()}
        return lowered.get(name.lower())
    if isinstance(obj, list) and isinstance(name, int | float):
        index = int(name)
        return obj[index] if 0 <= index < len(obj) else None
    return None


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def _format(fmt: str, *args: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: to_text(args[int(m.group(1))]), fmt)


class _Parser:
    def __init__(
        self, text: str, contexts: Mapping[str, Any], status: Mapping[str, bool] | None
    ) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if not match or match.end() == pos:
                raise ExpressionError(f"cannot parse {text!r} at {text[pos:]!r}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
        self.pos = 0
        self.contexts = contexts
        self.status = dict(status or {"success": True, "failure": False, "cancelled": False})
        self.functions: dict[str, Callable[..., Any]] = {
            "always": lambda: True,
            "success": lambda: self.status["success"],
            "failure": lambda: self.status["failure"],
            "cancelled": lambda: self.status["cancelled"],
            "fromjson": lambda s: json.loads(s),
            "tojson": lambda v: json.dumps(v, indent=2),
            "contains": lambda a, b: (
                any(_equal(x, b) for x in a)
                if isinstance(a, list)
                else to_text(b).lower() in to_text(a).lower()
            ),
            "startswith": lambda a, b: to_text(a).lower().startswith(to_text(b).lower()),
            "endswith": lambda a, b: to_text(a).lower().endswith(to_text(b).lower()),
            "format": _format,
            "join": lambda a, sep=",": (
                sep.join(to_text(x) for x in a) if isinstance(a, list) else to_text(a)
            ),
        }

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise ExpressionError(f"expected {value or 'more'} in {self.text!r}")
        self.pos += 1
        return tok

    def parse(self) -> Any:
        value = self.or_()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()[1]!r} in {self.text!r}")  # type: ignore[index]
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.cmp()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.cmp()
            value = right if truthy(value) else value
        return value

    def cmp(self) -> Any:
        left = self.unary()
        tok = self.peek()
        if tok and tok[1] in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            right = self.unary()
            op = tok[1]
            if op == "==":
                return _equal(left, right)
            if op == "!=":
                return not _equal(left, right)
            try:
                return {"<": left < right, "<=": left <= right, ">": left > right}.get(
                    op, left >= right
                )
            except TypeError:
                return False
        return left

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not truthy(self.unary())
        return self.postfix()

    def postfix(self) -> Any:
        value = self.primary()
        while True:
            tok = self.peek()
            if tok == ("op", "."):
                self.take()
                kind, name = self.take()
                if kind != "name":
                    raise ExpressionError(f"expected a property name in {self.text!r}")
                value = _lookup(value, name)
            elif tok == ("op", "["):
                self.take()
                key = self.or_()
                self.take("]")
                value = _lookup(value, key)
            else:
                return value

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "op" and text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "name":
            lowered = text.lower()
            if lowered in ("true", "false"):
                return lowered == "true"
            if lowered == "null":
                return None
            if self.peek() == ("op", "("):
                func = self.functions.get(lowered)
                if func is None:
                    raise ExpressionError(f"function {text}() is not supported by the rehearsal")
                self.take("(")
                args = []
                while self.peek() != ("op", ")"):
                    args.append(self.or_())
                    if self.peek() == ("op", ","):
                        self.take()
                self.take(")")
                return func(*args)
            if lowered not in {k.lower() for k in self.contexts}:
                raise ExpressionError(f"unknown context '{text}' in {self.text!r}")
            return _lookup(self.contexts, text)
        raise ExpressionError(f"unexpected {text!r} in {self.text!r}")


def evaluate(
    expression: str, contexts: Mapping[str, Any], status: Mapping[str, bool] | None = None
) -> Any:
    """The value of one expression (without ``${{ }}``); ``status`` feeds success()/failure()."""
    return _Parser(expression.strip(), contexts, status).parse()


def interpolate(text: Any, contexts: Mapping[str, Any]) -> Any:
    """``text`` with every ``${{ expr }}`` replaced; a string that is exactly one expression keeps
    the expression's value (a list stays a list); non-strings are returned as they are."""
    if not isinstance(text, str):
        return text
    whole = _WHOLE.fullmatch(text.strip())
    if whole:
        return evaluate(whole.group(1), contexts)
    return _INTERPOLATION.sub(lambda m: to_text(evaluate(m.group(1), contexts)), text)


def condition(text: Any, contexts: Mapping[str, Any], status: Mapping[str, bool]) -> bool:
    """An ``if:`` value: without a status function it means ``success() && (text)``."""
    if text is None or text == "":
        return status["success"]
    if isinstance(text, bool):
        return text and status["success"]
    expr = str(text).strip()
    whole = _WHOLE.fullmatch(expr)
    if whole:
        expr = whole.group(1).strip()
    value = truthy(evaluate(expr, contexts, status))
    if not any(f in expr.replace(" ", "") for f in STATUS_FUNCTIONS):
        return value and status["success"]
    return value
