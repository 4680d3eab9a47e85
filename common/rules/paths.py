"""Paths into values (emqx_rule_maps): `a.b`, `a[1]`, `a[-1]`, `a[2..3]` read, and the
copy-on-write put of `SELECT x AS a.b[1]`. A string met on a path is read as JSON when it is JSON;
a missing key or index reads as None. Used by the compiled expressions, the output fields and
`${...}` templates.
"""

from __future__ import annotations

from typing import Any

from common.rules.errors import RuleRuntimeError
from common.rules.values import loads, to_str


def _decode_if_text(data: Any) -> Any:
    """A string met on a path is read as JSON when it is JSON (EMQX's general_find)."""
    if isinstance(data, str):
        try:
            return loads(data)
        except ValueError:
            return None
    return data


def _getnth(index: Any, items: list[Any]) -> Any:
    if type(index) is not int or index == 0:
        return None
    if index > 0:
        return items[index - 1] if index <= len(items) else None
    return items[index] if -index <= len(items) else None


def _get_key(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        return data.get(key)
    if isinstance(data, str):
        data = _decode_if_text(data)
        if isinstance(data, dict):
            return data.get(key)
    return None


def _get_index(data: Any, index: Any) -> Any:
    if isinstance(data, str):
        data = _decode_if_text(data)
    if isinstance(data, list):
        return _getnth(index, data)
    return None


def _range_index(index: Any, length: int) -> int:
    if type(index) is not int:
        raise RuleRuntimeError(f"a range bound must be an integer, got {to_str(index)}")
    if index == 0:
        raise RuleRuntimeError("a range bound cannot be 0: indexes start at 1")
    return index if index > 0 else length + index + 1


def _get_range(data: Any, begin: Any, end: Any) -> list[Any]:
    if isinstance(data, str):
        data = _decode_if_text(data)
    if not isinstance(data, list):
        raise RuleRuntimeError("a range [a..b] needs an array")
    first = _range_index(begin, len(data))
    last = _range_index(end, len(data))
    if first < 1:
        first = 1
    return data[first - 1 : max(first - 1, last)]


def _setnth(index: Any, items: Any, value: Any) -> list[Any]:
    if not isinstance(items, list):
        return [value]
    if index == "head":
        return [value, *items]
    if index == "tail":
        return [*items, value]
    if type(index) is not int or index == 0:
        return items
    position = index - 1 if index > 0 else len(items) + index
    if 0 <= position < len(items):
        copy = list(items)
        copy[position] = value
        return copy
    return items


def _put(path: list[tuple[Any, ...]], value: Any, data: Any) -> Any:
    """Copy-on-write nested put: containers on the path are copied, the rest shared."""
    if not path:
        return value
    kind, key = path[0][0], path[0][1] if len(path[0]) > 1 else None
    if kind == "key":
        sub = _get_key(data, key)  # type: ignore[arg-type]  # a "key" step has its key
        base = dict(data) if isinstance(data, dict) else {}
        base[key] = _put(path[1:], value, sub)
        return base
    if kind in ("head", "tail"):
        return _setnth(kind, data, _put(path[1:], value, None))
    sub = _get_index(data, key) if isinstance(data, list) else None
    return _setnth(key, data, _put(path[1:], value, sub))
