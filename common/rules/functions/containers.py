"""Maps and arrays: dotted paths into maps (`map_get`, `map_put`), map access and listing (`mget`,
`mput`, `map_keys`, ...), and arrays (`nth`, `length`, `sublist`, `first`, `last`,
`contains`). A map argument may be JSON text of one (`_map`).
"""

from __future__ import annotations

from typing import Any

from common.rules.functions.conversion import _map
from common.rules.functions.registry import _bad, _get_path, _int, _register
from common.rules.values import loads, term_equal, to_str


@_register("map_new")
def _map_new():
    return {}


def _map_path(name: str, key: Any, *rest: Any) -> str:
    """map_get's and map_put's key: a dotted path, which only a string is (EMQX splits it with
    string:split, which raises on anything else: `map_get(1, 1)` fails the message)."""
    if not isinstance(key, str):
        raise _bad(name, key, *rest)
    return key


@_register("map_get")
def _map_get(key, data, default=None):
    # Data that is not a map (nor JSON text of one) has no such key: the default, as in EMQX.
    return _get_path(data, _map_path("map_get", key, data), default)


@_register("map_put")
def _map_put(key, value, data):
    keys = _map_path("map_put", key, value, data).split(".")

    def put(target, index):
        if isinstance(target, str):
            try:
                target = loads(target)
            except ValueError:
                target = {}
        base = dict(target) if isinstance(target, dict) else {}
        if index == len(keys) - 1:
            base[keys[index]] = value
        else:
            base[keys[index]] = put(base.get(keys[index]), index + 1)
        return base

    return put(data, 0)


@_register("mget")
def _mget(key, data, default=None):
    return _map(data).get(to_str(key), default)


@_register("mput")
def _mput(key, value, data):
    result = dict(_map(data))
    result[to_str(key)] = value
    return result


@_register("map_keys")
def _map_keys(data):
    return list(_map(data).keys())


@_register("map_values")
def _map_values(data):
    return list(_map(data).values())


@_register("map_to_entries")
def _map_to_entries(data):
    return [{"key": k, "value": v} for k, v in _map(data).items()]


@_register("map_size")
def _map_size(data):
    return len(_map(data))


def _list(name: str, value: Any, *rest: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _bad(name, value, *rest)
    return value


@_register("nth")
def _nth(n, items):
    items = _list("nth", items, n)
    if isinstance(n, str):
        try:
            n = int(n)
        except ValueError:
            raise _bad("nth", n, items) from None
    _int("nth", n)
    if n < 1 or n > len(items):
        raise _bad("nth", n, items)
    return items[n - 1]


@_register("length")
def _length(items):
    return len(_list("length", items))


@_register("sublist")
def _sublist(a, b, c=None):
    if c is None:
        length, items = a, _list("sublist", b, a)
        _int("sublist", length)
        if length < 0:
            raise _bad("sublist", a, b)
        return items[:length]
    start, length, items = a, b, _list("sublist", c, a, b)
    _int("sublist", start, length)
    if start < 1 or length < 0 or start > len(items) + 1:
        raise _bad("sublist", a, b, c)
    return items[start - 1 : start - 1 + length]


@_register("first")
def _first(items):
    items = _list("first", items)
    if not items:
        raise _bad("first", items)
    return items[0]


@_register("last")
def _last(items):
    items = _list("last", items)
    if not items:
        raise _bad("last", items)
    return items[-1]


@_register("contains")
def _contains(item, items):
    items = _list("contains", items, item)
    # lists:member is exact (=:=): 1 is not 1.0
    return any(type(x) is type(item) and term_equal(x, item) for x in items)
