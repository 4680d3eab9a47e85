"""EMQX's rule SQL built-in functions (emqx_rule_funcs / emqx_variform_bif), by category.

Each function takes already-evaluated arguments and returns a value of the dialect (see
`values`). A function given arguments it does not accept raises RuleRuntimeError: the message
counts as failed, as in EMQX (`bad_sql_function_argument`). Functions that read the message
itself (`topic()`, `clientid()`, ...) are in `CONTEXT_FUNCTIONS` and get the row first.

Left out on purpose (compile error naming why): getenv (server environment), kv_store_* and
proc_dict_* (state shared across messages and tenants), jq, term_encode/term_decode, mongo_date.

Regular expressions: tenants write them, so they must never block a worker. Patterns run on the
`regex` module (PCRE-like, as Erlang's `re`) with a time limit per call (REGEX_TIMEOUT_S), and
input and pattern lengths are bounded; a call that hits a limit fails that message only.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import functools
import hashlib
import inspect
import math
import random as _random
import re
import struct
import time
import uuid
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import regex

from common.rules.budget import MAX_ITEMS, MAX_STRING, string_too_long, too_many_items
from common.rules.errors import RuleRuntimeError
from common.rules.topics import topic_match
from common.rules.values import (
    JSON_NULL,
    BinStr,
    BitStr,
    compare_eq,
    erlang_float,
    erlang_int,
    from_bytes,
    is_number,
    json_encode,
    loads,
    term_equal,
    to_bytes,
    to_str,
)

REGEX_TIMEOUT_S = 0.05
REGEX_MAX_INPUT = 1 << 20
REGEX_MAX_PATTERN = 1000
MAX_INFLATED = 16 << 20  # gunzip/unzip output bound (decompression bombs)
MAX_BUILT_STRING = 1 << 20  # pad/sprintf widths: a rule cannot ask for gigabytes
MAX_SUBBITS = 1 << 19  # bits subbits takes at a time (64 KiB)
# Functions whose result can be many times their input (pad, replace, join, ...) check its size
# before building it (`common.rules.budget.MAX_STRING`); the evaluator checks every other result
# after each call.

FUNCTIONS: dict[str, Callable[..., Any]] = {}
CONTEXT_FUNCTIONS: set[str] = set()
ARITIES: dict[str, tuple[int, int | None]] = {}


def _register(*names: str, context: bool = False):
    def wrap(fn):
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if context:
            params = params[1:]
        low = sum(
            1
            for p in params
            if p.default is inspect.Parameter.empty and p.kind is not p.VAR_POSITIONAL
        )
        high = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(params)
        for name in names or (fn.__name__.rstrip("_"),):
            FUNCTIONS[name] = fn
            ARITIES[name] = (low, high)
            if context:
                CONTEXT_FUNCTIONS.add(name)
        return fn

    return wrap


def _bad(name: str, *args: Any) -> RuleRuntimeError:
    shown = ", ".join(_show(a) for a in args)
    return RuleRuntimeError(f"bad argument to {name}({shown})")


def _show(value: Any) -> str:
    text = json_encode(value) if not isinstance(value, str) else repr(str.__str__(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _num(name: str, *values: Any) -> None:
    for value in values:
        if not is_number(value):
            raise _bad(name, *values)


def _int(name: str, *values: Any) -> None:
    for value in values:
        if type(value) is not int:
            raise _bad(name, *values)


def _text(name: str, value: Any, *rest: Any) -> str:
    """A string argument; EMQX passes atoms (true/false) as their names and rejects null."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    raise _bad(name, value, *rest)


# -- message context ------------------------------------------------------------------------


@_register("topic", context=True)
def _topic(env, n=None):
    topic = env.column("topic")
    if n is None or topic is None:
        return topic
    _int("topic", n)
    levels = topic.split("/")
    if n < 1 or n > len(levels):
        raise _bad("topic", n)
    return levels[n - 1]


@_register("clientid", context=True)
def _clientid(env):
    return env.column("clientid")


@_register("username", context=True)
def _username(env):
    return env.column("username")


@_register("qos", context=True)
def _qos(env):
    return env.column("qos")


@_register("msgid", context=True)
def _msgid(env):
    return env.column("id")


@_register("flags", context=True)
def _flags(env):
    return env.column("flags") or {}


@_register("flag", context=True)
def _flag(env, name):
    return (env.column("flags") or {}).get(to_str(name))


@_register("peerhost", "clientip", context=True)
def _peerhost(env):
    return env.column("peerhost")


@_register("payload", context=True)
def _payload(env, path=None):
    if path is None:
        return env.column("payload")
    try:
        data = env.payload_json()
    except RuleRuntimeError:
        return None
    return _get_path(data, to_str(path))


@_register("null")
def _null():
    return None


@_register("coalesce")
def _coalesce(*values):
    if len(values) == 1 and isinstance(values[0], list):
        values = tuple(values[0])
    for value in values:
        if value is not None:
            return value
    return None


@_register("coalesce_ne")
def _coalesce_ne(*values):
    if len(values) == 1 and isinstance(values[0], list):
        values = tuple(values[0])
    for value in values:
        if value is not None and value != "":
            return value
    return None


@_register("contains_topic")
def _contains_topic(filters, topic, qos=None):
    return _find_filter(filters, topic, lambda t, f: t == f, qos)


@_register("contains_topic_match")
def _contains_topic_match(filters, topic, qos=None):
    return _find_filter(filters, topic, lambda f, t: topic_match(t, f), qos)


def _find_filter(filters, topic, match, qos):
    if not isinstance(filters, list):
        raise _bad("contains_topic", filters, topic)
    for item in filters:
        filt = item.get("topic") if isinstance(item, dict) else item
        if isinstance(filt, str) and isinstance(topic, str) and match(filt, topic):
            if qos is None:
                return True
            return isinstance(item, dict) and compare_eq(item.get("qos"), qos)
    return False


# -- math -----------------------------------------------------------------------------------


def _math1(name: str, fn: Callable[[float], Any]):
    def call(x):
        _num(name, x)
        try:
            return fn(x)
        except (ValueError, OverflowError):
            raise _bad(name, x) from None

    call.__name__ = name
    _register(name)(call)


for _name, _fn in {
    "acos": math.acos,
    "acosh": math.acosh,
    "asin": math.asin,
    "asinh": math.asinh,
    "atan": math.atan,
    "atanh": math.atanh,
    "cos": math.cos,
    "cosh": math.cosh,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "sinh": math.sinh,
    "sqrt": lambda x: math.sqrt(x),
    "tan": math.tan,
    "tanh": math.tanh,
    "abs": abs,
    "ceil": math.ceil,
    "floor": math.floor,
    "round": lambda x: int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5)),
}.items():
    _math1(_name, _fn)  # type: ignore[arg-type]  # builtins and lambdas, each float -> number


@_register("power")
def _power(x, y):
    _num("power", x, y)
    try:
        return math.pow(x, y)
    except (ValueError, OverflowError):
        raise _bad("power", x, y) from None


@_register("fmod")
def _fmod(x, y):
    _num("fmod", x, y)
    try:
        return math.fmod(x, y)
    except (ValueError, ZeroDivisionError):
        raise _bad("fmod", x, y) from None


@_register("mod")
def _mod_fn(x, y):
    """EMQX's mod(x, y): the remainder of integers, with the sign of x (as `x mod y`)."""
    _int("mod", x, y)
    if y == 0:
        raise RuleRuntimeError("division by zero")
    rest = abs(x) % abs(y)
    return rest if x >= 0 else -rest


@_register("div")
def _div_fn(x, y):
    """EMQX's div(x, y): integer division truncating toward zero (as `x div y`)."""
    _int("div", x, y)
    if y == 0:
        raise RuleRuntimeError("division by zero")
    quotient = abs(x) // abs(y)
    return quotient if (x >= 0) == (y >= 0) else -quotient


@_register("eq")
def _eq(x, y):
    return term_equal(x, y)


@_register("random")
def _rand():
    return _random.random()


# -- bits -----------------------------------------------------------------------------------


@_register("bitnot")
def _bitnot(x):
    _int("bitnot", x)
    return ~x


@_register("bitand")
def _bitand(x, y):
    _int("bitand", x, y)
    return x & y


@_register("bitor")
def _bitor(x, y):
    _int("bitor", x, y)
    return x | y


@_register("bitxor")
def _bitxor(x, y):
    _int("bitxor", x, y)
    return x ^ y


@_register("bitsl")
def _bitsl(x, n):
    _int("bitsl", x, n)
    if n > 4096:
        raise _bad("bitsl", x, n)
    return x << n if n >= 0 else x >> -n


@_register("bitsr")
def _bitsr(x, n):
    _int("bitsr", x, n)
    if -n > 4096:
        raise _bad("bitsr", x, n)
    return x >> n if n >= 0 else x << -n


@_register("bitsize")
def _bitsize(data):
    if isinstance(data, BitStr):
        return data.bits
    return len(to_bytes(_text("bitsize", data))) * 8


@_register("bytesize")
def _bytesize(data):
    return len(to_bytes(_text("bytesize", data)))


@_register("subbits")
def _subbits(data, start_or_len, length=None, kind="integer", sign="unsigned", endian="big"):
    raw = to_bytes(_text("subbits", data))
    if length is None:
        start, length = 1, start_or_len
    else:
        start = start_or_len
    _int("subbits", start, length)
    if length > MAX_SUBBITS:
        raise RuleRuntimeError(f"subbits: at most {MAX_SUBBITS} bits at a time")
    if isinstance(data, BitStr):  # what an earlier subbits(…, 'bits') gave: bits, not bytes
        bits, begin = data.bit_text(), start - 1
    else:
        first_byte = max(0, (start - 1) // 8)
        raw = raw[first_byte : first_byte + (length + 7) // 8 + 1]
        bits = "".join(f"{b:08b}" for b in raw)  # only the bytes the bits lie in
        begin = start - 1 - first_byte * 8
    if begin < 0 or begin >= len(bits) or length <= 0:
        return None
    chunk = bits[begin : begin + length]
    length = len(chunk)
    if kind == "bits":
        if length % 8:
            return BitStr.of(chunk)  # Erlang's bit string, padded in front where bytes are due
        return from_bytes(int(chunk, 2).to_bytes(length // 8, "big"))
    if kind == "float":
        if length not in (32, 64):
            raise _bad("subbits", data, start, length, kind)
        as_bytes = int(chunk, 2).to_bytes(length // 8, "big")
        if endian == "little":
            as_bytes = as_bytes[::-1]
        return struct.unpack(">f" if length == 32 else ">d", as_bytes)[0]
    if kind != "integer":
        raise _bad("subbits", data, start, length, kind)
    if endian == "little":
        if length % 8:
            raise _bad("subbits", data, start, length, kind, sign, endian)
        value = int.from_bytes(int(chunk, 2).to_bytes(length // 8, "big"), "little")
    else:
        value = int(chunk, 2)
    if sign == "signed" and value >= 1 << (length - 1):
        value -= 1 << length
    return value


# -- type conversion ------------------------------------------------------------------------


@_register("str")
def _str(value):
    return to_str(value)


@_register("str_utf8")
def _str_utf8(value):
    return to_str(value)


@_register("str_utf16_le")
def _str_utf16_le(value):
    return BinStr(to_str(value).encode("utf-16-le"))


@_register("bool")
def _bool(value):
    if value is True or value == "true" or (is_number(value) and value == 1):
        return True
    if value is False or value == "false" or (is_number(value) and value == 0):
        return False
    raise _bad("bool", value)


@_register("int")
def _int_(value):
    if isinstance(value, bool):
        return 1 if value else 0
    if type(value) is int:
        return value
    if type(value) is float:
        return math.floor(value)
    if isinstance(value, str):
        number = erlang_int(value)
        if number is not None:
            return number
        real = erlang_float(value)
        if real is not None and math.isfinite(real):
            return math.floor(real)
    raise _bad("int", value)


@_register("float")
def _float(value, decimals=None):
    if is_number(value):
        result = float(value)
    elif isinstance(value, str):
        real = erlang_float(value)
        if real is None:
            whole = erlang_int(value)
            real = float(whole) if whole is not None else None
        if real is None:
            raise _bad("float", value)
        result = real
    else:
        raise _bad("float", value)
    if decimals is not None:
        _int("float", decimals)
        if decimals <= 0:
            raise _bad("float", value, decimals)
        result = round(result, decimals)
    return result


@_register("float2str")
def _float2str(value, precision):
    _num("float2str", value)
    _int("float2str", precision)
    text = f"{float(value):.{max(0, min(precision, 253))}f}"
    if "." in text:
        text = text.rstrip("0")
        if text.endswith("."):
            text += "0"
    return text


@_register("map")
def _map(value):
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            decoded = loads(value)
        except ValueError:
            raise _bad("map", value) from None
        if isinstance(decoded, dict):
            return decoded
        raise _bad("map", value)
    if isinstance(value, list):
        try:
            return {to_str(k): v for k, v in value}
        except (TypeError, ValueError):
            raise _bad("map", value) from None
    raise _bad("map", value)


@_register("bin2hexstr")
def _bin2hexstr(data, prefix=None):
    text = to_bytes(_text("bin2hexstr", data)).hex().upper()
    if isinstance(data, BitStr) and (-data.bits) % 8 >= 4:
        text = text[1:]  # EMQX pads the bits to bytes in front, then drops a whole 0 digit
    return (to_str(prefix) + text) if prefix is not None else text


@_register("sqlserver_bin2hexstr")
def _sqlserver_bin2hexstr(data):
    return _bin2hexstr(data, "0x")


@_register("hexstr2bin")
def _hexstr2bin(text, prefix=None):
    text = _text("hexstr2bin", text)
    if prefix is not None:
        if not text.startswith(prefix):
            raise RuleRuntimeError("hexstr2bin: binary prefix does not match")
        text = text[len(prefix) :]
    if len(text) % 2:
        text = "0" + text
    try:
        return from_bytes(bytes.fromhex(text))
    except ValueError:
        raise _bad("hexstr2bin", text) from None


@_register("int2hexstr")
def _int2hexstr(value):
    _int("int2hexstr", value)
    return format(value, "X") if value >= 0 else "-" + format(-value, "X")


# -- type checks ----------------------------------------------------------------------------


@_register("is_null")
def _is_null(value):
    return value is None


@_register("is_null_var")
def _is_null_var(value):
    return value is None or value is JSON_NULL


@_register("is_not_null")
def _is_not_null(value):
    return value is not None


@_register("is_not_null_var")
def _is_not_null_var(value):
    return value is not None and value is not JSON_NULL


@_register("is_str")
def _is_str(value):
    return isinstance(value, str)


@_register("is_bool")
def _is_bool(value):
    return isinstance(value, bool)


@_register("is_int")
def _is_int(value):
    return type(value) is int


@_register("is_float")
def _is_float(value):
    return type(value) is float


@_register("is_num")
def _is_num(value):
    return is_number(value)


@_register("is_map")
def _is_map(value):
    return isinstance(value, dict)


@_register("is_array")
def _is_array(value):
    return isinstance(value, list)


@_register("is_empty")
def _is_empty(value):
    if value == [] or value == "" or value == {}:
        return True
    if isinstance(value, list):
        return False
    return len(_map(value)) == 0


# -- strings --------------------------------------------------------------------------------

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


@functools.lru_cache(maxsize=512)
def _compile_regex(pattern: str):
    if len(pattern) > REGEX_MAX_PATTERN:
        raise RuleRuntimeError(f"regular expression longer than {REGEX_MAX_PATTERN} characters")
    try:
        return regex.compile(pattern, regex.V0)
    except regex.error as exc:
        raise RuleRuntimeError(f"invalid regular expression {pattern!r}: {exc}") from None


def _regex_call(name: str, fn: Callable[[], Any], s: str):
    if len(s) > REGEX_MAX_INPUT:
        raise RuleRuntimeError(f"{name}: input longer than {REGEX_MAX_INPUT} characters")
    try:
        return fn()
    except TimeoutError:
        raise RuleRuntimeError(
            f"{name}: the regular expression took longer than {REGEX_TIMEOUT_S * 1000:.0f} ms"
        ) from None


@_register("regex_match")
def _regex_match(s, pattern):
    s = _text("regex_match", s, pattern)
    compiled = _compile_regex(to_str(pattern))
    return _regex_call(
        "regex_match", lambda: compiled.search(s, timeout=REGEX_TIMEOUT_S) is not None, s
    )


def _erlang_replacement(template: str) -> Callable[[Any], str]:
    """Erlang re:replace's replacement: `&` or `\\0` the whole match, `\\N` group N, `\\&` a
    literal ampersand."""
    parts: list[str | int] = []
    i = 0
    literal: list[str] = []
    while i < len(template):
        char = template[i]
        if char == "\\" and i + 1 < len(template):
            nxt = template[i + 1]
            if nxt.isdigit():
                j = i + 1
                while j < len(template) and template[j].isdigit():
                    j += 1
                parts.append("".join(literal))
                literal = []
                parts.append(int(template[i + 1 : j]))
                i = j
                continue
            literal.append(nxt)
            i += 2
            continue
        if char == "&":
            parts.append("".join(literal))
            literal = []
            parts.append(0)
        else:
            literal.append(char)
        i += 1
    parts.append("".join(literal))

    def expand(match) -> str:
        out = []
        for part in parts:
            if isinstance(part, int):
                try:
                    out.append(match.group(part) or "")
                except IndexError:
                    out.append("")
            else:
                out.append(part)
        return "".join(out)

    return expand


@_register("regex_replace")
def _regex_replace(s, pattern, replacement):
    s = _text("regex_replace", s, pattern, replacement)
    compiled = _compile_regex(to_str(pattern))
    expand = _erlang_replacement(to_str(replacement))
    grown = [len(s)]

    def bounded(match):  # what the replacements add, checked as they are made
        text = expand(match)
        grown[0] += len(text) - (match.end() - match.start())
        if grown[0] > MAX_STRING:
            raise string_too_long("regex_replace", grown[0])
        return text

    return _regex_call(
        "regex_replace", lambda: compiled.sub(bounded, s, timeout=REGEX_TIMEOUT_S), s
    )


@_register("regex_extract")
def _regex_extract(s, pattern):
    s = _text("regex_extract", s, pattern)
    compiled = _compile_regex(to_str(pattern))
    match = _regex_call("regex_extract", lambda: compiled.search(s, timeout=REGEX_TIMEOUT_S), s)
    if match is None:
        return []
    return [g if g is not None else "" for g in match.groups()]


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


def _sprintf(fmt: str, args: list[Any]) -> str:
    """Erlang io_lib:format for the directives rules use: ~s ~ts ~p ~w ~d ~f ~e ~g ~b ~x ~X
    ~c ~n ~~ (with optional field width and precision, e.g. ~.2f, ~5d)."""
    out, i, used, built = [], 0, 0, len(fmt)
    pattern = re.compile(r"~(-?\d*)(?:\.(\d*))?(?:\.(.))?(t?)([sSpPwWdfeEgGbBxXcni~])")
    for match in pattern.finditer(fmt):
        out.append(fmt[i : match.start()])
        i = match.end()
        width, precision, _pad_char, _t, kind = match.groups()
        if kind == "~":
            out.append("~")
            continue
        if kind == "n":
            out.append("\n")
            continue
        if used >= len(args):
            raise RuleRuntimeError("sprintf: fewer arguments than ~ directives")
        arg = args[used]
        used += 1
        if kind == "i":
            continue
        if kind in "sS":
            text = to_str(arg)
        elif kind in "pPwW":
            text = _erlang_term(arg)
        elif kind == "d":
            if type(arg) is not int:
                raise _bad("sprintf", fmt, arg)
            text = str(arg)
        elif kind in "feEgG":
            if not is_number(arg):
                raise _bad("sprintf", fmt, arg)
            digits = min(int(precision), 100) if precision else 6
            text = format(float(arg), f".{digits}{'e' if kind in 'eE' else kind.lower()}")
        elif kind in "bB":
            _int("sprintf", arg)
            text = format(arg, "b")
        elif kind in "xX":
            _int("sprintf", arg)
            text = format(arg, "x" if kind == "x" else "X")
        elif kind == "c":
            _int("sprintf", arg)
            text = chr(arg)
        else:
            text = to_str(arg)
        if width:
            size = int(width)
            if abs(size) > MAX_BUILT_STRING:
                raise RuleRuntimeError(f"sprintf: field width above {MAX_BUILT_STRING}")
            text = text.rjust(size) if size > 0 else text.ljust(-size)
        out.append(text)
        built += len(text)
        if built > MAX_STRING:
            raise string_too_long("sprintf", built)
    out.append(fmt[i:])
    if used != len(args):
        raise RuleRuntimeError("sprintf: more arguments than ~ directives")
    return "".join(out)


def _erlang_term(value: Any) -> str:
    if isinstance(value, str):
        return '<<"' + value.replace('"', '\\"') + '">>'
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_erlang_term(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ",".join(f"{_erlang_term(k)} => {_erlang_term(v)}" for k, v in value.items())
        return "#{" + inner + "}"
    return to_str(value)


@_register("sprintf")
def _sprintf_fn(fmt, *args):
    return _sprintf(_text("sprintf", fmt), list(args))


@_register("sprintf_s")
def _sprintf_s(fmt, args):
    if not isinstance(args, list):
        raise _bad("sprintf_s", fmt, args)
    return _sprintf(_text("sprintf_s", fmt), args)


# -- maps and arrays ------------------------------------------------------------------------


def _get_path(data: Any, dotted: str, default: Any = None) -> Any:
    for key in dotted.split("."):
        if isinstance(data, str):
            try:
                data = loads(data)
            except ValueError:
                return default
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


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


# -- hashing --------------------------------------------------------------------------------


@_register("md5")
def _md5(data):
    return hashlib.md5(to_bytes(_text("md5", data))).hexdigest()


@_register("sha")
def _sha(data):
    return hashlib.sha1(to_bytes(_text("sha", data))).hexdigest()


@_register("sha256")
def _sha256(data):
    return hashlib.sha256(to_bytes(_text("sha256", data))).hexdigest()


_HASHES = {"md5", "sha", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3_256", "sha3_512"}


@_register("hash")
def _hash(algorithm, data):
    algorithm = to_str(algorithm).lower()
    if algorithm not in _HASHES:
        raise RuleRuntimeError(f"hash: unknown algorithm {algorithm!r}")
    name = "sha1" if algorithm == "sha" else algorithm
    return hashlib.new(name, to_bytes(_text("hash", data))).hexdigest()


@_register("hash_to_range")
def _hash_to_range(data, low, high):
    data = _text("hash_to_range", data, low, high)
    _int("hash_to_range", low, high)
    if not data or low > high:
        raise _bad("hash_to_range", data, low, high)
    number = int(hashlib.sha256(to_bytes(data)).hexdigest(), 16)
    return low + number % (high - low + 1)


@_register("map_to_range")
def _map_to_range(data, low, high):
    _int("map_to_range", low, high)
    if isinstance(data, str) and data:
        number = int.from_bytes(to_bytes(data), "big")
    elif type(data) is int:
        number = data
    else:
        raise _bad("map_to_range", data, low, high)
    if low > high:
        raise _bad("map_to_range", data, low, high)
    return low + number % (high - low + 1)


# -- compression ----------------------------------------------------------------------------


def _inflate(name: str, data: bytes, wbits: int) -> str:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, MAX_INFLATED)
    except zlib.error:
        raise _bad(name, from_bytes(data)) from None
    if inflater.unconsumed_tail:
        raise RuleRuntimeError(f"{name}: output larger than {MAX_INFLATED} bytes")
    return from_bytes(out)


@_register("gzip")
def _gzip(data):
    """The bytes Erlang's zlib:gzip gives: default level, no mtime, OS 3 (unix)."""
    raw = to_bytes(_text("gzip", data))
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    body = compressor.compress(raw) + compressor.flush()
    trailer = struct.pack("<II", zlib.crc32(raw) & 0xFFFFFFFF, len(raw) & 0xFFFFFFFF)
    return from_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + body + trailer)


@_register("gunzip")
def _gunzip(data):
    return _inflate("gunzip", to_bytes(_text("gunzip", data)), 16 + zlib.MAX_WBITS)


@_register("zip")
def _zip(data):
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = to_bytes(_text("zip", data))
    return from_bytes(compressor.compress(raw) + compressor.flush())


@_register("unzip")
def _unzip(data):
    return _inflate("unzip", to_bytes(_text("unzip", data)), -zlib.MAX_WBITS)


@_register("zip_compress")
def _zip_compress(data):
    return from_bytes(zlib.compress(to_bytes(_text("zip_compress", data))))


@_register("zip_uncompress")
def _zip_uncompress(data):
    return _inflate("zip_uncompress", to_bytes(_text("zip_uncompress", data)), zlib.MAX_WBITS)


# -- encoding -------------------------------------------------------------------------------


def _b64_opts(name: str, opts: tuple[Any, ...]) -> tuple[bool, bool]:
    urlsafe, padding = False, True
    for opt in opts:
        if opt == "urlsafe":
            urlsafe = True
        elif opt == "no_padding":
            padding = False
    return urlsafe, padding


@_register("base64_encode")
def _base64_encode(data, *opts):
    if len(opts) > 2:
        raise _bad("base64_encode", data, *opts)
    urlsafe, padding = _b64_opts("base64_encode", opts)
    raw = to_bytes(_text("base64_encode", data))
    text = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    return text if padding else text.rstrip("=")


@_register("base64_decode")
def _base64_decode(data, *opts):
    if len(opts) > 2:
        raise _bad("base64_decode", data, *opts)
    urlsafe, padding = _b64_opts("base64_decode", opts)
    text = _text("base64_decode", data)
    if not padding:
        text = text + "=" * (-len(text) % 4)
    try:
        raw = (base64.urlsafe_b64decode if urlsafe else base64.b64decode)(
            text.encode(), **({} if urlsafe else {"validate": True})
        )
    except (binascii.Error, ValueError):
        raise _bad("base64_decode", data) from None
    return from_bytes(raw)


@_register("json_encode")
def _json_encode(value):
    return json_encode(value)


@_register("json_decode")
def _json_decode(text):
    text = _text("json_decode", text)
    try:
        return loads(text)
    except ValueError:
        raise RuleRuntimeError(f"json_decode: not JSON: {_show(text)}") from None


@_register("uuid_v4")
def _uuid_v4():
    return str(uuid.uuid4())


@_register("uuid_v4_no_hyphen")
def _uuid_v4_no_hyphen():
    return uuid.uuid4().hex


# -- time -----------------------------------------------------------------------------------

_UNITS = {"second": 1, "millisecond": 1_000, "microsecond": 1_000_000, "nanosecond": 10**9}


def _unit(value: Any) -> int:
    scale = _UNITS.get(value) if isinstance(value, str) else None
    if scale is None:
        raise RuleRuntimeError(f"invalid time unit {value!r}: use second, millisecond, ...")
    return scale


def _now(scale: int) -> int:
    return time.time_ns() // (10**9 // scale)


def _offset_seconds(offset: Any) -> int:
    """EMQX's offset: integer seconds, 'Z', 'local' (UTC here: servers run in UTC), or
    '+08:00' / '-0530' / '+08:00:30'."""
    if offset is None or offset in ("local", "Z", "z", ""):
        return 0
    if type(offset) is int:
        return offset
    if isinstance(offset, str):
        match = re.fullmatch(r"([+-])(\d{2}):?(\d{2})(?::?(\d{2}))?", offset)
        if match:
            sign = -1 if match.group(1) == "-" else 1
            hours, minutes, seconds = (int(g or 0) for g in match.group(2, 3, 4))
            return sign * (hours * 3600 + minutes * 60 + seconds)
    raise RuleRuntimeError(f"invalid time offset {offset!r}")


def _format_offset(seconds: int, style: str) -> str:
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if style == "z":
        return f"{sign}{hours:02d}{minutes:02d}"
    if style == ":z":
        return f"{sign}{hours:02d}:{minutes:02d}"
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"


def _split_epoch(value: int, scale: int) -> tuple[datetime, int]:
    seconds, fraction = divmod(value, scale)
    nanos = fraction * (10**9 // scale)
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds), nanos


def _rfc3339(value: int, scale: int, offset: int = 0) -> str:
    moment, nanos = _split_epoch(value, scale)
    moment = moment + timedelta(seconds=offset)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    digits = {1: 0, 1_000: 3, 1_000_000: 6, 10**9: 9}[scale]
    if digits:
        text += "." + f"{nanos:09d}"[:digits]
    return text + _format_offset(offset, ":z")


@_register("now_rfc3339")
def _now_rfc3339(unit="second"):
    scale = _unit(unit)
    return _rfc3339(_now(scale), scale)


@_register("unix_ts_to_rfc3339")
def _unix_ts_to_rfc3339(epoch, unit="second"):
    _int("unix_ts_to_rfc3339", epoch)
    scale = _unit(unit)
    try:
        return _rfc3339(epoch, scale)
    except (OverflowError, ValueError):
        raise _bad("unix_ts_to_rfc3339", epoch, unit) from None


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)


@_register("rfc3339_to_unix_ts")
def _rfc3339_to_unix_ts(text, unit="second"):
    text = _text("rfc3339_to_unix_ts", text)
    scale = _unit(unit)
    match = _RFC3339.fullmatch(text)
    if not match:
        raise RuleRuntimeError(f"rfc3339_to_unix_ts: not an RFC 3339 date-time: {_show(text)}")
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise RuleRuntimeError(f"rfc3339_to_unix_ts: invalid date {_show(text)}") from None
    nanos = int((match.group(7) or "0").ljust(9, "0"))
    offset = _offset_seconds(match.group(8))
    total_ns = (calendar.timegm(moment.timetuple()) - offset) * 10**9 + nanos
    return total_ns // (10**9 // scale)


@_register("now_timestamp")
def _now_timestamp(unit="second"):
    return _now(_unit(unit))


_DATE_DIRECTIVES: dict[str, Callable[[datetime, int, int], str]] = {
    "%Y": lambda m, n, o: f"{m.year:04d}",
    "%m": lambda m, n, o: f"{m.month:02d}",
    "%d": lambda m, n, o: f"{m.day:02d}",
    "%H": lambda m, n, o: f"{m.hour:02d}",
    "%M": lambda m, n, o: f"{m.minute:02d}",
    "%S": lambda m, n, o: f"{m.second:02d}",
    "%N": lambda m, n, o: f"{n:09d}",
    "%3N": lambda m, n, o: f"{n:09d}"[:3],
    "%6N": lambda m, n, o: f"{n:09d}"[:6],
    "%z": lambda m, n, o: _format_offset(o, "z"),
    "%:z": lambda m, n, o: _format_offset(o, ":z"),
    "%::z": lambda m, n, o: _format_offset(o, "::z"),
}


@functools.lru_cache(maxsize=256)
def _date_plan(fmt: str) -> tuple[Any, ...]:
    """A format string cut once into literals and directives (formats repeat per rule)."""
    plan: list[Any] = []
    i = 0
    while i < len(fmt):
        for token in ("%::z", "%:z", "%3N", "%6N"):
            if fmt.startswith(token, i):
                plan.append(_DATE_DIRECTIVES[token])
                i += len(token)
                break
        else:
            two = fmt[i : i + 2]
            if two in _DATE_DIRECTIVES:
                plan.append(_DATE_DIRECTIVES[two])
                i += 2
            else:
                plan.append(fmt[i])
                i += 1
    return tuple(plan)


def _format_date(value: int, scale: int, offset: int, fmt: str) -> str:
    moment, nanos = _split_epoch(value, scale)
    moment = moment + timedelta(seconds=offset)
    return "".join(
        part if type(part) is str else part(moment, nanos, offset) for part in _date_plan(fmt)
    )


@_register("format_date")
def _format_date_fn(unit, offset, fmt, epoch=None):
    scale = _unit(unit)
    if epoch is None:
        epoch = _now(scale)
    _int("format_date", epoch)
    try:
        return _format_date(epoch, scale, _offset_seconds(offset), _text("format_date", fmt))
    except (OverflowError, ValueError):
        raise _bad("format_date", unit, offset, fmt, epoch) from None


_DATE_FIELDS = {
    "%Y": r"(?P<Y>\d{4})",
    "%m": r"(?P<m>\d{1,2})",
    "%d": r"(?P<d>\d{1,2})",
    "%H": r"(?P<H>\d{1,2})",
    "%M": r"(?P<M>\d{1,2})",
    "%S": r"(?P<S>\d{1,2})",
    "%N": r"(?P<N>\d{9})",
    "%3N": r"(?P<N3>\d{3})",
    "%6N": r"(?P<N6>\d{6})",
    "%z": r"(?P<z>[+-]\d{4}|[Zz])",
    "%:z": r"(?P<z>[+-]\d{2}:\d{2}|[Zz])",
    "%::z": r"(?P<z>[+-]\d{2}:\d{2}:\d{2}|[Zz])",
}


@_register("date_to_unix_ts")
def _date_to_unix_ts(unit, a, b, c=None):
    """date_to_unix_ts(unit, [offset,] format, date): the inverse of format_date."""
    if c is None:
        offset, fmt, text = None, a, b
    else:
        offset, fmt, text = a, b, c
    scale = _unit(unit)
    fmt, text = _text("date_to_unix_ts", fmt), _text("date_to_unix_ts", text)
    pattern, i = [], 0
    while i < len(fmt):
        for token in ("%::z", "%:z", "%3N", "%6N", *_DATE_FIELDS):
            if fmt.startswith(token, i):
                pattern.append(_DATE_FIELDS[token])
                i += len(token)
                break
        else:
            # EMQX reads separators loosely: "%H-%M-%S" also parses "10:40:12".
            char = fmt[i]
            pattern.append(re.escape(char) if char.isalnum() else r"[^0-9]")
            i += 1
    try:
        match = re.fullmatch("".join(pattern), text)
    except re.error:
        raise _bad("date_to_unix_ts", unit, fmt, text) from None
    if not match:
        raise RuleRuntimeError(f"date_to_unix_ts: {_show(text)} does not match {_show(fmt)}")
    fields = match.groupdict()
    for part, label in (("Y", "year"), ("m", "month"), ("d", "day")):
        if not fields.get(part):
            raise RuleRuntimeError(f"date_to_unix_ts: the format has no {label} ({fmt!r})")
    try:
        moment = datetime(
            int(fields.get("Y") or 1970),
            int(fields.get("m") or 1),
            int(fields.get("d") or 1),
            int(fields.get("H") or 0),
            int(fields.get("M") or 0),
            int(fields.get("S") or 0),
            tzinfo=UTC,
        )
    except ValueError:
        raise RuleRuntimeError(f"date_to_unix_ts: invalid date {_show(text)}") from None
    nanos = 0
    if fields.get("N"):
        nanos = int(fields["N"])
    elif fields.get("N3"):
        nanos = int(fields["N3"]) * 1_000_000
    elif fields.get("N6"):
        nanos = int(fields["N6"]) * 1_000
    zone = fields.get("z")
    shift = _offset_seconds(zone) if zone else _offset_seconds(offset)
    total_ns = (calendar.timegm(moment.timetuple()) - shift) * 10**9 + nanos
    return total_ns // (10**9 // scale)


@_register("timezone_to_second", "timezone_to_offset_seconds")
def _timezone_to_second(zone):
    return _offset_seconds(zone)
