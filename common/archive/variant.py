"""JSON payloads as Spark VARIANT values, encoded once when history is compacted.

A rule reading `payload.x` needs the payload parsed. Spark's `parse_json` did that at every
backfill, row by row (the largest single cost measured). The compactor now stores each payload
already parsed, in the column `payload_variant` of the history parts: the two binaries of the
Parquet/Spark variant encoding (`metadata`, `value`; the spec is Apache Parquet's
`VariantEncoding.md`), unshredded. Spark reads the column as VARIANT.

Exactness over coverage: `encode_json` returns a value only where the result is the one Spark's
`parse_json` builds from the same bytes (same types: integers that fit a long as the smallest
integer type, other numbers without an exponent as a decimal of up to 38 digits, else a double;
strings as UTF-8; object fields sorted by key as Java sorts strings). Anything else is `None` and
stored as NULL: invalid UTF-8, text Python's strict JSON parser refuses (NaN, trailing text, ...),
duplicate keys, lone surrogates, very deep or very large documents, numbers beyond 38 digits. A
reader falls back to `parse_json` for a NULL (`spark.rules.native.Stage.parsed`), so such rows get
Spark's own answer, and history without the column reads as before.

pyarrow only: no Spark here (the compactor runs without one).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from decimal import Decimal

import pyarrow as pa

PAYLOAD_VARIANT = "payload_variant"
VARIANT_STRUCT = pa.struct(
    [pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary(), False)]
)

MAX_PAYLOAD = 1 << 20  # larger payloads are left to parse_json (Spark limits a variant's size)
MAX_DEPTH = 64  # Jackson allows 1000 levels; deeper documents are left to parse_json
MAX_NUMBER_TEXT = 100  # Jackson refuses number texts past 1000 characters
MAX_KEY = 1000  # Jackson refuses names past 50,000 characters
MAX_DECIMAL = 38  # digits and scale of Spark's DECIMAL16

# Primitive type ids of the variant encoding.
_NULL, _TRUE, _FALSE = 0, 1, 2
_INT8, _INT16, _INT32, _INT64, _DOUBLE = 3, 4, 5, 6, 7
_DECIMAL4, _DECIMAL8, _DECIMAL16, _STRING = 8, 9, 10, 16
_SHORT_STRING_MAX = 63
_LONG = 1 << 63


class _NotExact(Exception):
    """This document's variant is left to Spark's parse_json."""


class _Float(str):
    """The text of a JSON number with a fraction or an exponent (kept: its type depends on it)."""

    __slots__ = ()


def _refuse_constant(name: str) -> object:
    raise _NotExact(name)  # NaN, Infinity: Jackson refuses them


# C-level hooks only (tuple, a str subclass): an object arrives as a tuple of (key, value) pairs
# (arrays stay lists), integers as ints (their text is str(int): JSON has no leading zeros).
_DECODER = json.JSONDecoder(
    object_pairs_hook=tuple, parse_float=_Float, parse_constant=_refuse_constant
)


# Payloads of one device type share their shapes: the sorted field order of an object's keys and
# a document's metadata are computed once per shape (bounded caches).
_CACHE = 4096
_ORDERS: dict[tuple[str, ...], list[int]] = {}
_METADATA: dict[tuple[bytes, ...], bytes] = {}


def _size(n: int) -> int:
    """Bytes of the smallest unsigned little-endian integer holding n (1..4)."""
    return 1 if n < 0x100 else 2 if n < 0x10000 else 3 if n < 0x1000000 else 4


class _Builder:
    def __init__(self) -> None:
        self.keys: dict[str, int] = {}
        self.key_bytes: list[bytes] = []

    def key_id(self, key: str) -> int:
        index = self.keys.get(key)
        if index is None:
            if len(key) > MAX_KEY:
                raise _NotExact("a long key")
            index = self.keys[key] = len(self.key_bytes)
            self.key_bytes.append(key.encode())
        return index

    def metadata(self) -> bytes:
        shape = tuple(self.key_bytes)
        cached = _METADATA.get(shape)
        if cached is None:
            if len(_METADATA) >= _CACHE:
                _METADATA.clear()
            cached = _METADATA[shape] = self._metadata()
        return cached

    def _metadata(self) -> bytes:
        total = sum(len(k) for k in self.key_bytes)
        width = _size(max(total, len(self.key_bytes)))
        out = bytearray([0x01 | ((width - 1) << 6)])  # version 1, not sorted
        out += len(self.key_bytes).to_bytes(width, "little")
        offset = 0
        out += offset.to_bytes(width, "little")
        for key in self.key_bytes:
            offset += len(key)
            out += offset.to_bytes(width, "little")
        for key in self.key_bytes:
            out += key
        return bytes(out)

    def value(self, node: object, depth: int = 0) -> bytes:
        kind = type(node)
        if kind is _Float:
            return _floating(node)  # type: ignore[arg-type]
        if kind is int:
            return _integer(node)  # type: ignore[arg-type]
        if kind is str:
            data = node.encode()  # a lone surrogate raises UnicodeEncodeError: not exact
            if len(data) <= _SHORT_STRING_MAX:
                return bytes([(len(data) << 2) | 1]) + data
            return bytes([_STRING << 2]) + len(data).to_bytes(4, "little") + data
        if node is None:
            return bytes([_NULL << 2])
        if node is True:
            return bytes([_TRUE << 2])
        if node is False:
            return bytes([_FALSE << 2])
        if depth >= MAX_DEPTH:
            raise _NotExact("too deep")
        if kind is tuple:
            return self._object(node, depth)  # type: ignore[arg-type]
        if kind is list:
            return self._array(node, depth)
        raise _NotExact(type(node).__name__)

    def _object(self, pairs: tuple[tuple[str, object], ...], depth: int) -> bytes:
        keys = tuple(k for k, _ in pairs)
        order = _ORDERS.get(keys)
        if order is None:
            if len(set(keys)) != len(keys):
                raise _NotExact("a duplicate key")  # parse_json refuses it
            # Spark sorts fields as Java compares strings: by UTF-16 code units.
            order = sorted(range(len(keys)), key=lambda i: keys[i].encode("utf-16-be"))
            if len(_ORDERS) >= _CACHE:
                _ORDERS.clear()
            _ORDERS[keys] = order
        ids = [self.key_id(keys[i]) for i in order]
        values = [self.value(pairs[i][1], depth + 1) for i in order]
        return _container(2, ids, values)

    def _array(self, items: list, depth: int) -> bytes:
        return _container(3, None, [self.value(item, depth + 1) for item in items])


def _container(basic: int, ids: list[int] | None, values: list[bytes]) -> bytes:
    count = len(values)
    large = count > 0xFF
    total = sum(len(v) for v in values)
    offset_width = _size(total)
    if ids is None:  # array: is_large at bit 2, offset size - 1 at bits 0-1 of the value header
        header = ((int(large) << 2) | (offset_width - 1)) << 2 | basic
    else:  # object: is_large at bit 4, field id size - 1 at bits 2-3, offset size - 1 at 0-1
        id_width = _size(max(ids, default=0))
        header = ((int(large) << 4) | ((id_width - 1) << 2) | (offset_width - 1)) << 2 | basic
    out = bytearray([header])
    out += count.to_bytes(4 if large else 1, "little")
    if ids is not None:
        for field_id in ids:
            out += field_id.to_bytes(id_width, "little")
    offset = 0
    out += offset.to_bytes(offset_width, "little")
    for value in values:
        offset += len(value)
        out += offset.to_bytes(offset_width, "little")
    for value in values:
        out += value
    return bytes(out)


def _integer(number: int) -> bytes:
    if -_LONG <= number < _LONG:  # Jackson's getLongValue; the smallest integer type holds it
        for type_id, width in ((_INT8, 1), (_INT16, 2), (_INT32, 4), (_INT64, 8)):
            if -(1 << (8 * width - 1)) <= number < (1 << (8 * width - 1)):
                return bytes([type_id << 2]) + number.to_bytes(width, "little", signed=True)
    return _floating(str(number))  # beyond a long: a decimal of up to 38 digits, as Spark does


def _floating(text: str) -> bytes:
    """Spark's `parseFloatingPoint`: a decimal when the text has no exponent and fits 38 digits
    and scale 38 (as `new BigDecimal(text)`: its digits and scale kept, trailing zeros too), else
    the double Jackson reads (Java's correctly rounded parse, as Python's)."""
    if len(text) > MAX_NUMBER_TEXT:
        raise _NotExact("a long number")
    if "e" not in text and "E" not in text:
        sign, digits, exponent = Decimal(text).as_tuple()
        assert isinstance(exponent, int)
        scale = -exponent
        unscaled = int("".join(map(str, digits)))
        precision = len(str(unscaled))  # BigDecimal's precision: of the unscaled value
        if 0 <= scale <= MAX_DECIMAL and precision <= MAX_DECIMAL:
            if sign:
                unscaled = -unscaled
            if scale <= 9 and precision <= 9:
                type_id, width = _DECIMAL4, 4
            elif scale <= 18 and precision <= 18:
                type_id, width = _DECIMAL8, 8
            else:
                type_id, width = _DECIMAL16, 16
            return bytes([type_id << 2, scale]) + unscaled.to_bytes(width, "little", signed=True)
        if len(digits) > MAX_DECIMAL:
            raise _NotExact("a number beyond 38 digits")  # Jackson's double of it: not ours
    return bytes([_DOUBLE << 2]) + struct.pack("<d", float(text))


def encode_json(payload: bytes | None) -> tuple[bytes, bytes] | None:
    """(metadata, value) of the VARIANT Spark's `parse_json` makes of `payload` (UTF-8 JSON), or
    None where that is not certain (the reader parses those itself)."""
    encoded = _encode(payload, None)
    return None if encoded is None else encoded


def _encode(payload: bytes | None, leaves: list | None) -> tuple[bytes, bytes] | None:
    if payload is None or len(payload) > MAX_PAYLOAD:
        return None
    try:
        text = payload.decode("utf-8")
        node = _DECODER.decode(text)
        builder = _Builder()
        value = builder.value(node)
        metadata = builder.metadata()
    except (ValueError, _NotExact, RecursionError, UnicodeError):
        # json's errors are ValueErrors (JSONDecodeError); a lone surrogate fails to encode
        return None
    if leaves is not None and type(node) is tuple:
        _typed_leaves(node, "", leaves, 1)
    return metadata, value


# -- shredding: common fields as typed columns ----------------------------------------------------
#
# Besides the whole VARIANT, a part stores the scalar fields its payloads commonly hold (objects
# only, keys only: `site.id`) as typed columns of the struct `payload_fields`, one per field and
# type, named `{path}|{kind}`: `i` an integer that fits a long (BIGINT), `d{s}` a decimal of scale
# s (1..15) with at most 15 digits (DECIMAL(18, s): its double is the correctly rounded one), `s` a
# string. A typed value is set only where the payload's variant holds exactly that type and value
# at that path (and the variant is stored): everywhere else NULL, and a reader uses the variant.
# So a reader may use either; `spark.rules.native` reads the typed column first.

PAYLOAD_FIELDS = "payload_fields"
SHRED_FIELDS = 32  # at most this many typed columns per part
SHRED_SHARE = 0.05  # a field and type held by at least this share of the part's rows
SHRED_DEPTH = 3  # levels of objects
_SHRED_DIGITS = 15


def _typed_leaves(pairs: tuple, prefix: str, out: list, depth: int) -> None:
    for key, item in pairs:
        if not key or "." in key or "|" in key or len(key) > 64:
            continue
        path = prefix + key
        kind = type(item)
        if kind is int:
            if -_LONG <= item < _LONG:
                out.append((path + "|i", item))
        elif kind is str:
            out.append((path + "|s", item))
        elif kind is _Float:
            if "e" in item or "E" in item or len(item) > _SHRED_DIGITS + 2:
                continue
            number = Decimal(item)
            _, digits, exponent = number.as_tuple()
            scale = -exponent  # type: ignore[operator]
            if 1 <= scale <= _SHRED_DIGITS and len(digits) <= _SHRED_DIGITS:
                out.append((f"{path}|d{scale}", number))
        elif kind is tuple and depth < SHRED_DEPTH:
            _typed_leaves(item, path + ".", out, depth + 1)


def _field_type(name: str) -> pa.DataType:
    kind = name.rsplit("|", 1)[1]
    if kind == "i":
        return pa.int64()
    if kind == "s":
        return pa.string()
    return pa.decimal128(18, int(kind[1:]))


def typed_field_path(name: str) -> tuple[tuple[str, ...], str]:
    """(the keys, the kind) a `payload_fields` column is of."""
    path, kind = name.rsplit("|", 1)
    return tuple(path.split(".")), kind


def variant_column(payloads: Iterable[bytes | None]) -> pa.Array:
    """The `payload_variant` column of these payloads (NULL where `encode_json` declines)."""
    return variant_columns(payloads, shred=False)[0]


def variant_columns(
    payloads: Iterable[bytes | None], shred: bool = True, fields: list[str] | None = None
) -> tuple[pa.Array, pa.Array | None]:
    """`payload_variant` and, with `shred`, `payload_fields` (the fields named, or those at
    least `SHRED_SHARE` of the rows hold, up to `SHRED_FIELDS`; None when there are none)."""
    metadata: list[bytes] = []
    values: list[bytes] = []
    mask: list[bool] = []
    rows_leaves: list[list] = []
    for payload in payloads:
        leaves: list | None = [] if shred else None
        encoded = _encode(payload, leaves)
        if encoded is None:
            metadata.append(b"")
            values.append(b"")
            mask.append(True)
        else:
            metadata.append(encoded[0])
            values.append(encoded[1])
            mask.append(False)
        if shred:
            rows_leaves.append(leaves or [])
    variant = pa.StructArray.from_arrays(
        [pa.array(metadata, pa.binary()), pa.array(values, pa.binary())],
        fields=list(VARIANT_STRUCT),
        mask=pa.array(mask, pa.bool_()),
    )
    if not shred:
        return variant, None
    if fields is None:
        counts: dict[str, int] = {}
        for leaves in rows_leaves:
            for name, _ in leaves:
                counts[name] = counts.get(name, 0) + 1
        least = max(1, int(SHRED_SHARE * len(rows_leaves)))
        common = sorted((n for n, c in counts.items() if c >= least), key=lambda n: -counts[n])
        fields = sorted(common[:SHRED_FIELDS])
    if not fields:
        return variant, None
    columns: dict[str, list] = {name: [None] * len(rows_leaves) for name in fields}
    for row, leaves in enumerate(rows_leaves):
        for name, value in leaves:
            column = columns.get(name)
            if column is not None:
                column[row] = value
    arrays = [pa.array(columns[name], _field_type(name)) for name in fields]
    return variant, pa.StructArray.from_arrays(arrays, names=fields)
