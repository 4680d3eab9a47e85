"""JSON that a device or a REST client sends, read so that what the stores would refuse is refused
here, with its reason, before it joins a write that other requests (other tenants') share.

Python's `json` accepts more than JSON: `NaN`, `Infinity` and `-Infinity` (Postgres' jsonb
refuses them, and the whole shadow batch with them), the escape `\\u0000` (jsonb and text refuse
the NUL character), a lone surrogate such as `\\ud800` (not encodable as UTF-8: a reply that
echoes it cannot be written), and nesting as deep as the payload allows (its parser and every
recursive walk after it raise RecursionError). `loads` refuses each of them with `Refused`, whose
message says which in words a person understands.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32  # a document's levels of nesting: far above any AWS API's (shadows: 6 a section)


class Refused(ValueError):
    """A payload that is not JSON the platform stores: `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


NOT_JSON = "not valid JSON"
NOT_UTF8 = "not valid UTF-8"
NOT_A_NUMBER = "NaN and Infinity are not JSON numbers"
NUL = "a string holds the NUL character (\\u0000)"
SURROGATE = "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)"


def too_deep(limit: int) -> str:
    return f"nested more than {limit} levels deep"


def _constant(name: str) -> Any:
    raise Refused(NOT_A_NUMBER)


_DECODER = json.JSONDecoder(parse_constant=_constant)


def loads(payload: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of `payload`, or `Refused`: not UTF-8, not JSON, `NaN`/`Infinity`, a NUL
    or a lone surrogate in a string or key, more than `max_depth` levels of arrays and objects."""
    if isinstance(payload, bytes):
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(NOT_UTF8) from None
    else:
        text = payload
    if _deeper_than(text, max_depth):  # before parsing: the parser recurses per level
        raise Refused(too_deep(max_depth))
    try:
        value = _DECODER.decode(text)
    except Refused:
        raise
    except (ValueError, RecursionError):
        raise Refused(NOT_JSON) from None
    reason = problem(value)
    if reason is not None:
        raise Refused(reason)
    return value


def _deeper_than(text: str, limit: int) -> bool:
    """Whether brackets open more than `limit` deep, counted outside strings: a bound on the
    parsed value's depth, found without recursing (valid JSON nests exactly so)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def problem(value: Any) -> str | None:
    """What a store would refuse in a parsed value (a NUL or a lone surrogate in a string or
    key, a NaN or infinite float), or None. Iterative: no depth makes it raise."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            reason = text_problem(item)
            if reason is not None:
                return reason
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and (item != item or item in (float("inf"), float("-inf"))):
            return NOT_A_NUMBER
    return None


def text_problem(text: str) -> str | None:
    """Why Postgres (text, jsonb) or a UTF-8 encoder would refuse `text`, or None."""
    if "\x00" in text:
        return NUL
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return SURROGATE
    return None
