"""The GitHub expression subset the rehearsal evaluates."""

from __future__ import annotations

import pytest

from conformance.ci.expressions import ExpressionError, condition, evaluate, interpolate

CTX = {
    "env": {"ACT": "true", "EMPTY": ""},
    "inputs": {"filter": ""},
    "matrix": {"session": "conformance-2.13"},
    "needs": {"sessions": {"outputs": {"sessions": '["a", "b"]'}, "result": "success"}},
    "steps": {"m": {"outputs": {"x-y": "1"}}},
    "github": {"token": "t"},
}
OK = {"success": True, "failure": False, "cancelled": False}
FAILED = {"success": False, "failure": True, "cancelled": False}


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("matrix.session", "conformance-2.13"),
        ("fromJSON(needs.sessions.outputs.sessions)", ["a", "b"]),
        ("steps.m.outputs['x-y']", "1"),
        ("!env.ACT", False),
        ("!env.MISSING", True),
        ("env.EMPTY || 'default'", "default"),
        ("inputs.filter == ''", True),
        ("needs.sessions.result == 'SUCCESS'", True),
        ("contains(fromJSON('[\"a\"]'), 'a') && startsWith('abc', 'ab')", True),
        ("format('{0}-{1}', 'a', 2)", "a-2"),
        ("join(fromJSON(needs.sessions.outputs.sessions), ',')", "a,b"),
        ("(1 < 2) && 3 >= 3", True),
        ("null", None),
    ],
)
def test_evaluate(expr: str, value: object) -> None:
    assert evaluate(expr, CTX) == value


def test_interpolate_keeps_a_whole_expression_value() -> None:
    assert interpolate("${{ fromJSON(needs.sessions.outputs.sessions) }}", CTX) == ["a", "b"]
    assert interpolate('nox -s "${{ matrix.session }}"', CTX) == 'nox -s "conformance-2.13"'
    assert interpolate("a ${{ !env.ACT }} b", CTX) == "a false b"
    # two expressions around text are two, not one from the first `${{` to the last `}}`
    assert interpolate("${{ matrix.session }}-x-${{ env.ACT }}", CTX) == "conformance-2.13-x-true"


def test_conditions_imply_success_unless_a_status_function_is_used() -> None:
    assert condition(None, CTX, OK) and not condition(None, CTX, FAILED)
    assert not condition("${{ !env.ACT }}", CTX, OK)
    assert condition("always()", CTX, FAILED) and condition("${{ failure() }}", CTX, FAILED)
    assert not condition("env.ACT == 'true'", CTX, FAILED)


@pytest.mark.parametrize("expr", ["hashFiles('x')", "unknown.ctx", "needs.*.result", "1 +"])
def test_unsupported_is_an_error(expr: str) -> None:
    with pytest.raises(ExpressionError):
        evaluate(expr, CTX)
