"""Strings: case, trimming, slicing, splitting, padding and replacing (`lower`, `substr`,
`split`, `pad`, `replace`, ...), joining lists into text (`join_to_string`,
`join_to_sql_values_string`, `map_to_redis_hset_args`) and `unescape`. Regular expressions are in
`patterns`, `sprintf` in `sprintf`.
"""

from __future__ import annotations

import re
from typing import Any

from common.rules.budget import MAX_ITEMS, MAX_STRING, string_too_long, too_many_items
from common.rules.errors import RuleRuntimeError
from common.rules.functions.conversion import _float2str
from common.rules.functions.registry import MAX_BUILT_STRING, _bad, _int, _register, _text
from common.rules.values import json_encode, loads, to_bytes, to_str

_WS = " \t\n\r\x0b\x0c\u0085\u200e\u200f\u2028\u2029"


@_register("lower")
def _lower(s):
    return _text("lower", s).lower()


@_register("upper")
def _upper(s):
    return _text("upper", s).upper()


@_register("trim")
def _trim(s, chars=None):
    return _text("trim", s).strip(_WS if chars is None else to_str(chars))


@_register("ltrim")
def _ltrim(s, chars=None):
    return _text("ltrim", s).lstrip(_WS if chars is None else to_str(chars))


@_register("rtrim")
def _rtrim(s, chars=None):
    return _text("rtrim", s).rstrip(_WS if chars is None else to_str(chars))


@_register("reverse")
def _reverse(s):
    return _text("reverse", s)[::-1]


@_register("strlen")
def _strlen(s):
    return len(_text("strlen", s))


@_register("rm_prefix")
def _rm_prefix(s, prefix):
    s = _text("rm_prefix", s, prefix)
    prefix = to_str(prefix)
    return s[len(prefix) :] if prefix and s.startswith(prefix) else s


@_register("substr")
def _substr(s, start, length=None):
    """0-based start, as Erlang's string:slice."""
    s = _text("substr", s, start)
    _int("substr", start)
    if start < 0:
        raise _bad("substr", s, start)
    if length is None:
        return s[start:]
    _int("substr", length)
    if length < 0:
        raise _bad("substr", s, start, length)
    return s[start : start + length]


@_register("split")
def _split(s, sep, option=None):
    s = _text("split", s, sep)
    sep = _text("split", sep)
    if not sep:
        raise _bad("split", s, sep)
    if s.count(sep) >= MAX_ITEMS:
        raise too_many_items("split")
    if option is None:
        return [p for p in s.split(sep) if p]
    if option == "notrim":
        return s.split(sep)
    if option in ("leading", "leading_notrim"):
        parts = s.split(sep, 1)
    elif option in ("trailing", "trailing_notrim"):
        parts = s.rsplit(sep, 1)
    else:
        raise _bad("split", s, sep, option)
    return parts if option.endswith("_notrim") else [p for p in parts if p]


@_register("tokens")
def _tokens(s, separators, option=None):
    s = _text("tokens", s, separators)
    seps = set(to_str(separators))
    if option is not None:
        if option != "nocrlf":
            raise _bad("tokens", s, separators, option)
        seps |= {"\r", "\n"}
    if not seps:
        return [s] if s else []
    parts = re.split("[" + "".join(re.escape(c) for c in sorted(seps)) + "]+", s)
    out = [p for p in parts if p]
    if len(out) > MAX_ITEMS:
        raise too_many_items("tokens")
    return out


@_register("concat")
def _concat(*parts):
    if len(parts) == 1:
        if not isinstance(parts[0], list):
            raise _bad("concat", *parts)
        parts = tuple(parts[0])
    texts = [to_str(p) for p in parts]
    size = sum(map(len, texts))
    if size > MAX_STRING:
        raise string_too_long("concat", size)
    return "".join(texts)


@_register("pad")
def _pad(s, length, position="trailing", char=" "):
    s = _text("pad", s, length)
    _int("pad", length)
    if length > MAX_BUILT_STRING:
        raise RuleRuntimeError(f"pad: length above {MAX_BUILT_STRING}")
    char = to_str(char)
    missing = length - len(s)
    if missing <= 0 or not char:
        return s
    if len(char) > 1 and missing * len(char) > MAX_STRING:  # each missing place gets all of char
        raise string_too_long("pad", len(s) + missing * len(char))
    fill = (char * missing)[:missing] if len(char) == 1 else char * missing
    if position == "trailing":
        return s + fill
    if position == "leading":
        return fill + s
    if position == "both":
        left = missing // 2
        return (char * left) + s + (char * (missing - left))
    raise _bad("pad", s, length, position)


@_register("replace")
def _replace(s, pattern, replacement, option="all"):
    s = _text("replace", s, pattern, replacement)
    pattern, replacement = to_str(pattern), to_str(replacement)
    if not pattern:
        return s
    if option == "all":
        if len(replacement) > len(pattern):
            size = len(s) + s.count(pattern) * (len(replacement) - len(pattern))
            if size > MAX_STRING:
                raise string_too_long("replace", size)
        return s.replace(pattern, replacement)
    if option == "leading":
        return s.replace(pattern, replacement, 1)
    if option == "trailing":
        head, sep, tail = s.rpartition(pattern)
        return head + replacement + tail if sep else s
    raise _bad("replace", s, pattern, replacement, option)


@_register("ascii")
def _ascii(s):
    s = _text("ascii", s)
    if not s:
        raise _bad("ascii", s)
    return to_bytes(s)[0]


@_register("find")
def _find(s, pattern, position="leading"):
    s = _text("find", s, pattern)
    pattern = to_str(pattern)
    if position == "leading":
        index = s.find(pattern)
    elif position == "trailing":
        index = s.rfind(pattern)
    else:
        raise _bad("find", s, pattern, position)
    return "" if index < 0 else s[index:]


@_register("join_to_string")
def _join_to_string(sep_or_list, items=None):
    if items is None:
        sep, items = ", ", sep_or_list
    else:
        sep = sep_or_list
    if not isinstance(items, list) or not isinstance(sep, str):
        raise _bad("join_to_string", sep_or_list, items)
    texts = [to_str(item) for item in items]
    size = sum(map(len, texts)) + len(sep) * max(0, len(texts) - 1)
    if size > MAX_STRING:
        raise string_too_long("join_to_string", size)
    return sep.join(texts)


@_register("join_to_sql_values_string")
def _join_to_sql_values_string(items):
    if not isinstance(items, list):
        raise _bad("join_to_sql_values_string", items)
    out = []
    for item in items:
        if isinstance(item, str):
            out.append("'" + item.replace("\\", "\\\\").replace("'", "\\'") + "'")
        elif isinstance(item, (list, dict)):
            out.append("'" + json_encode(item).replace("'", "\\'") + "'")
        else:
            out.append(to_str(item))
    size = sum(map(len, out)) + 2 * len(out)
    if size > MAX_STRING:
        raise string_too_long("join_to_sql_values_string", size)
    return ", ".join(out)


@_register("map_to_redis_hset_args")
def _map_to_redis_hset_args(value):
    if isinstance(value, str):
        try:
            value = loads(value)
        except ValueError:
            return ["map_to_redis_hset_args"]
    if not isinstance(value, dict):
        return ["map_to_redis_hset_args"]
    out: list[Any] = ["map_to_redis_hset_args"]
    for key, val in value.items():
        if isinstance(val, bool):
            out += [key, "true" if val else "false"]
        elif type(val) is float:
            out += [key, _float2str(val, 6)]
        elif isinstance(val, (str, int)):
            out += [key, to_str(val)]
    return out


_ESCAPES = {
    "\\": "\\",
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "'": "'",
    '"': '"',
    "?": "?",
    "a": "\a",
}


@_register("unescape")
def _unescape(s):
    s = _text("unescape", s)
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        char = s[i]
        if char != "\\" or i + 1 >= len(s):
            out.append(char)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "x" and i + 2 < len(s) and s[i + 2] in "0123456789abcdefABCDEF":
            j = i + 2
            while j < len(s) and s[j] in "0123456789abcdefABCDEF":
                j += 1
            try:
                out.append(chr(int(s[i + 2 : j], 16)))
            except (ValueError, OverflowError):
                raise _bad("unescape", s) from None
            i = j
        else:
            raise RuleRuntimeError(f"unescape: unrecognized escape sequence \\{nxt}")
    return "".join(out)
