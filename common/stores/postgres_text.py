"""Values any tenant can produce, made storable in Postgres' text and jsonb.

Postgres text cannot hold NUL, and jsonb refuses the `\\u0000` escape as well as lone surrogates
(which UTF-8 cannot encode). A rule's output, a payload's string or an error quoting one may hold
either, and one such value must not fail a write that carries other tenants' rows. Each such
character becomes its visible escape (`\\u0000`, `\\ud800`): what a person reading the value
expects, and nothing else in the value changes.
"""

from __future__ import annotations

import json
import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NOT_UTF8 = re.compile("[\ud800-\udfff]")  # lone surrogates: no UTF-8 encoding holds them
MAX_DEPTH = 64  # deeper values are stored as their JSON text (budgets keep outputs shallower)


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def storable_text(text: str, pattern: re.Pattern[str] = _UNSTORABLE) -> str:
    """`text` with NUL and lone surrogates written as their `\\uXXXX` escapes."""
    if not pattern.search(text):
        return text
    return pattern.sub(_escape, text)


def storable_value(value: Any, depth: int = 0, pattern: re.Pattern[str] = _UNSTORABLE) -> Any:
    """A JSON-able value whose every string (keys too) is `storable_text`."""
    if isinstance(value, str):
        return storable_text(value, pattern)
    if depth >= MAX_DEPTH:
        return storable_text(json.dumps(value, default=str), pattern)
    if isinstance(value, dict):
        return {
            storable_text(str(k), pattern): storable_value(v, depth + 1, pattern)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [storable_value(v, depth + 1, pattern) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return storable_text(str(value), pattern)


def utf8_text(text: str) -> str:
    """`text` with lone surrogates escaped (NUL kept), so that it encodes as UTF-8: what Arrow
    and Parquet need of a string."""
    return storable_text(text, _NOT_UTF8)


def utf8_value(value: Any) -> Any:
    """`value` with lone surrogates escaped (NUL kept: JSON carries it), so that it encodes as
    UTF-8: what an HTTP response needs."""
    return storable_value(value, 0, _NOT_UTF8)


def storable_json(value: Any) -> str:
    """`value` as JSON text that jsonb accepts."""
    return json.dumps(storable_value(value), default=str)
