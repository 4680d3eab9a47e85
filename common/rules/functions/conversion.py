"""Types: conversions between the dialect's values (`str`, `int`, `float`, `bool`, `map`, hex
strings and binaries) and the type checks (`is_null`, `is_num`, `is_map`, `is_empty`, ...).
`_map` (a map, or JSON text of one) and `_float2str` are also what other families use.
"""

from __future__ import annotations

import math

from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import _bad, _int, _num, _register, _text
from common.rules.values import (
    JSON_NULL,
    BinStr,
    BitStr,
    erlang_float,
    erlang_int,
    from_bytes,
    is_number,
    loads,
    to_bytes,
    to_str,
)

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
