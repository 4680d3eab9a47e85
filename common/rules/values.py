"""Values of the dialect and EMQX's rules for comparing and converting them.

EMQX runs on Erlang terms; here they map to Python as: binary -> `str` (a `BinStr` when the bytes
are not UTF-8, so hashing/encoding still see the original bytes; a `BitStr` for a bit string
that is not whole bytes), integer -> `int`, float ->
`float`, the atoms true/false -> `bool`, `undefined` (a missing field) and JSON null -> `None`,
map -> `dict`, list -> `list`. Python's `True == 1` must never leak into a comparison: Erlang's
atoms are not numbers, so every operator here checks for `bool` first.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from common.rules.budget import MAX_STRING, measure
from common.rules.errors import RuleRuntimeError


class BinStr(str):
    """A binary that is not valid UTF-8: shown as Latin-1 text, `raw` keeps the bytes."""

    raw: bytes

    def __new__(cls, raw: bytes) -> BinStr:
        obj = super().__new__(cls, raw.decode("latin-1"))
        obj.raw = raw
        return obj


class BitStr(BinStr):
    """A bit string that is not a whole number of bytes (`subbits(…, 'bits')` of such a
    length): Erlang keeps the bits as they are; here `raw` holds them after the zero bits that
    fill the first byte (the padding EMQX's bin2hexstr adds in front), `bits` says how many."""

    bits: int

    @classmethod
    def of(cls, bit_text: str) -> BitStr:
        """From the bits as a text of 0s and 1s (its length not a multiple of 8)."""
        width = (len(bit_text) + 7) // 8
        obj = BinStr.__new__(cls, int(bit_text, 2).to_bytes(width, "big"))
        assert isinstance(obj, BitStr)  # __new__ of cls, a BitStr
        obj.bits = len(bit_text)
        return obj

    def bit_text(self) -> str:
        return "".join(f"{b:08b}" for b in self.raw)[-self.bits :]


def from_bytes(data: bytes) -> str:
    """Bytes as the dialect's binary: text when UTF-8, else a BinStr carrying the bytes."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return BinStr(data)


def to_bytes(value: Any) -> bytes:
    if isinstance(value, BinStr):
        return value.raw
    if isinstance(value, bytes):
        return value
    return to_str(value).encode()


class _JsonNull:
    """JSON's null, as EMQX keeps it apart from a missing value (`undefined`, here None): it is
    Erlang's atom `null` — not missing for comparisons, `str()` gives "null", outputs show null."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "null"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "JSON_NULL"


JSON_NULL = _JsonNull()


def _keep_nulls(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: (JSON_NULL if value is None else value) for key, value in pairs}


def _nulls_in_lists(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        return [JSON_NULL if v is None else _nulls_in_lists(v) for v in value]
    if kind is dict:
        for key, member in value.items():
            if type(member) is list or type(member) is dict:
                value[key] = _nulls_in_lists(member)
    return value


def loads(data: str | bytes) -> Any:
    """JSON text to values, each null inside an object or array kept as JSON_NULL. This extra
    work runs only when the text holds "null" at all, so most payloads decode at full speed."""
    has_null = (b"null" in data) if isinstance(data, bytes) else ("null" in data)
    if has_null:
        return _nulls_in_lists(json.loads(data, object_pairs_hook=_keep_nulls))
    return json.loads(data)


def is_number(value: Any) -> bool:
    return (type(value) is int) or (type(value) is float)


def format_float(value: float) -> str:
    """Erlang's float_to_binary(F, [{decimals, 10}, compact]): at most 10 decimals, no trailing
    zeros, at least one."""
    if math.isinf(value) or math.isnan(value):
        return str(value)
    text = f"{value:.10f}".rstrip("0")
    if text.endswith("."):
        text += "0"
    if text == "-0.0":
        return "-0.0"
    return text


def json_encode(value: Any) -> str:
    if type(value) is dict or type(value) is list:  # sized first: no gigabyte encodings
        measure(value, MAX_STRING)
    return json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False)


def to_str(value: Any) -> str:
    """EMQX's `str/1` (emqx_utils_conv:bin): how any value becomes a string."""
    if isinstance(value, str):
        return value
    if value is None:
        return "undefined"
    if value is JSON_NULL:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return format_float(value)
    if isinstance(value, list) and not value:
        return ""
    if isinstance(value, (dict, list)):
        return json_encode(value)
    if isinstance(value, bytes):
        return from_bytes(value)
    raise RuleRuntimeError(f"cannot convert {value!r} to a string")


_PLAIN = frozenset({str, int, bool, type(None)})


def jsonable(value: Any) -> Any:
    """A value as JSON can carry it (tuples to lists, keys to strings, BinStr to plain str,
    non-finite floats to null). Plain values are returned as they are, without a call each."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {
            (k if type(k) is str else to_str(k)): (v if type(v) in _PLAIN else jsonable(v))
            for k, v in value.items()
        }
    if kind is list or kind is tuple:
        return [v if type(v) in _PLAIN else jsonable(v) for v in value]
    if kind is float:
        return None if (math.isinf(value) or math.isnan(value)) else value
    if value is JSON_NULL:
        return None
    if isinstance(value, BinStr):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        return from_bytes(bytes(value))
    if isinstance(value, dict):
        return jsonable(dict(value))
    if isinstance(value, str):
        return str.__str__(value)
    return value


_ERLANG_INT = re.compile(r"[+-]?[0-9]+")
_ERLANG_FLOAT = re.compile(r"[+-]?[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?")


def erlang_int(text: str) -> int | None:
    """Erlang's binary_to_integer: digits with an optional sign, nothing else (no spaces)."""
    if _ERLANG_INT.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # beyond Python's digit limit
            return None
    return None


def erlang_float(text: str) -> float | None:
    """Erlang's binary_to_float: `1.5`, `-0.5e3`; not `1e3`, `.5` or `1.`."""
    if _ERLANG_FLOAT.fullmatch(text):
        try:
            return float(text)
        except (ValueError, OverflowError):
            return None
    return None


def parse_number(text: str) -> int | float:
    """Erlang's binary_to_integer, else binary_to_float: how a string meets a number."""
    number: int | float | None = erlang_int(text)
    if number is None:
        number = erlang_float(text)
    if number is None:
        raise RuleRuntimeError(f"cannot compare {text!r} with a number: not a number")
    return number


# Erlang's term order between types: number < atom < map < list < binary.
def _rank(value: Any) -> int:
    if value is None or value is JSON_NULL or isinstance(value, bool):
        return 1
    if is_number(value):
        return 0
    if isinstance(value, dict):
        return 2
    if isinstance(value, list):
        return 3
    return 4


def _atom_text(value: Any) -> str:
    if value is None:
        return "undefined"
    if value is JSON_NULL:
        return "null"
    return "true" if value else "false"


def term_equal(left: Any, right: Any) -> bool:
    """Erlang's `==` (1 == 1.0; true is not 1)."""
    lb, rb = isinstance(left, bool), isinstance(right, bool)
    if lb or rb:
        return lb and rb and left is right
    if left is None or right is None or left is JSON_NULL or right is JSON_NULL:
        return left is right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(term_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(term_equal(v, right[k]) for k, v in left.items())
    if is_number(left) and is_number(right):
        return bool(left == right)
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    return False


def term_compare(left: Any, right: Any) -> int:
    """Erlang's term order: -1, 0 or 1."""
    if term_equal(left, right):
        return 0
    lr, rr = _rank(left), _rank(right)
    if lr != rr:
        return -1 if lr < rr else 1
    if lr == 0:
        return -1 if left < right else 1
    if lr == 1:
        a, b = _atom_text(left), _atom_text(right)
        return -1 if a < b else (0 if a == b else 1)
    if lr == 3:
        for a, b in zip(left, right, strict=False):
            c = term_compare(a, b)
            if c:
                return c
        return -1 if len(left) < len(right) else (0 if len(left) == len(right) else 1)
    if lr == 2:
        if len(left) != len(right):
            return -1 if len(left) < len(right) else 1
        left_keys, right_keys = sorted(map(to_str, left)), sorted(map(to_str, right))
        if left_keys != right_keys:
            return -1 if left_keys < right_keys else 1
        for key in sorted(left):
            c = term_compare(left[key], right[key])
            if c:
                return c
        return 0
    left_bytes, right_bytes = to_bytes(left), to_bytes(right)
    return -1 if left_bytes < right_bytes else (0 if left_bytes == right_bytes else 1)


def _coerce(left: Any, right: Any) -> tuple[Any, Any]:
    """EMQX's compare/3: a string beside a number is read as a number; beside an atom, the atom
    is read as its name."""
    if is_number(left) and isinstance(right, str):
        return left, parse_number(right)
    if isinstance(left, str) and is_number(right):
        return parse_number(left), right
    if (isinstance(left, bool) or left is JSON_NULL) and isinstance(right, str):
        return _atom_text(left), right
    if isinstance(left, str) and (isinstance(right, bool) or right is JSON_NULL):
        return left, _atom_text(right)
    return left, right


def compare_eq(left: Any, right: Any) -> bool:
    if left is None or right is None:
        return left is None and right is None
    left, right = _coerce(left, right)
    return term_equal(left, right)


def compare_ne(left: Any, right: Any) -> bool:
    if left is None or right is None:
        return False  # EMQX: a missing side makes every comparison false, `<>` too
    left, right = _coerce(left, right)
    return not term_equal(left, right)


def _ordered(check: Callable[[int], bool]) -> Callable[[Any, Any], bool]:
    def compare(left: Any, right: Any) -> bool:
        if left is None or right is None:
            # undefined vs undefined compares as equal terms; one missing side is false.
            return left is None and right is None and check(0)
        left, right = _coerce(left, right)
        if is_number(left) and is_number(right) or type(left) is str and type(right) is str:
            return check(int(left > right) - int(left < right))
        return check(term_compare(left, right))

    return compare


compare_lt = _ordered(lambda c: c < 0)
compare_le = _ordered(lambda c: c <= 0)
compare_gt = _ordered(lambda c: c > 0)
compare_ge = _ordered(lambda c: c >= 0)


def truthy(value: Any) -> bool:
    """A condition holds only when it is the atom true (EMQX's match_conditions)."""
    return value is True
