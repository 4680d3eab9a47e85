"""The rule SQL's operators on evaluated values: comparisons (`=`, `<>`, `<`, ... and the
topic match `=~`), Erlang's strict equality (`IN`, `CASE x WHEN`), and arithmetic (`+` on
numbers or strings, `-`, `*`, `/`, `div`, `mod` with Erlang's signs). The expression compiler
picks them by operator name (`_COMPARE`, `_ARITH`); `_FAST_NUMERIC` is its shortcut for a
comparison with a number constant.
"""

from __future__ import annotations

import operator
from typing import Any

from common.rules.errors import RuleRuntimeError
from common.rules.topics import topic_match
from common.rules.values import (
    compare_eq,
    compare_ge,
    compare_gt,
    compare_le,
    compare_lt,
    compare_ne,
    is_number,
    term_equal,
    to_str,
)

_COMPARE = {
    "=": compare_eq,
    "!=": compare_ne,
    "<>": compare_ne,
    "<": compare_lt,
    "<=": compare_le,
    ">": compare_gt,
    ">=": compare_ge,
}


def _topic_cmp(topic: Any, topic_filter: Any) -> bool:
    if topic is None or topic_filter is None:
        return False
    return topic_match(to_str(topic), to_str(topic_filter))


def _strict_equal(a: Any, b: Any) -> bool:
    """Erlang's =:= (IN, CASE x WHEN, contains): 1 is not 1.0, '1' is not 1."""
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return term_equal(a, b)


def _add(x: Any, y: Any) -> Any:
    if is_number(x) and is_number(y):
        return x + y
    if isinstance(x, str) or isinstance(y, str):
        return to_str(x) + to_str(y)
    raise RuleRuntimeError(f"cannot add {to_str(x)} and {to_str(y)}")


def _numbers(op: str, x: Any, y: Any) -> None:
    if not (is_number(x) and is_number(y)):
        raise RuleRuntimeError(f"'{op}' needs numbers, got {to_str(x)} and {to_str(y)}")


def _sub(x, y):
    _numbers("-", x, y)
    return x - y


def _mul(x, y):
    _numbers("*", x, y)
    return x * y


def _div(x, y):
    _numbers("/", x, y)
    if y == 0:
        raise RuleRuntimeError("division by zero")
    return x / y


def _intdiv(x, y):
    if type(x) is not int or type(y) is not int:
        raise RuleRuntimeError(f"'div' needs integers, got {to_str(x)} and {to_str(y)}")
    if y == 0:
        raise RuleRuntimeError("division by zero")
    quotient = abs(x) // abs(y)
    return quotient if (x >= 0) == (y >= 0) else -quotient  # truncates toward zero


def _mod(x, y):
    if type(x) is not int or type(y) is not int:
        raise RuleRuntimeError(f"'mod' needs integers, got {to_str(x)} and {to_str(y)}")
    if y == 0:
        raise RuleRuntimeError("division by zero")
    rest = abs(x) % abs(y)
    return rest if x >= 0 else -rest  # Erlang rem: the sign of the dividend


_FAST_NUMERIC = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "!=": operator.ne,
    "<>": operator.ne,
}

_ARITH = {"+": _add, "-": _sub, "*": _mul, "/": _div, "div": _intdiv, "mod": _mod}
