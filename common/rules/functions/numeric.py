"""Numbers: math (`sqrt`, `power`, `round`, `mod`, `div`, ...), integer bit operations (`bitand`,
`bitsl`, ...), and the bits of binary data (`bitsize`, `bytesize`, `subbits`, which reads
integers, floats or bits out of a payload).
"""

from __future__ import annotations

import math
import random as _random
import struct
from collections.abc import Callable
from typing import Any

from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import _bad, _int, _num, _register, _text
from common.rules.values import BitStr, from_bytes, term_equal, to_bytes

MAX_SUBBITS = 1 << 19  # bits subbits takes at a time (64 KiB)


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
