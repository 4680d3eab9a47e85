"""Common JSON payload fields as typed columns, written once when history is compacted.

A rule reading `payload.temp` needs the payload parsed, and Spark's `parse_json` did that at
every backfill, row by row: the largest single cost of a backfill (bench/RESULTS.md). The
compactor parses each payload once instead and stores the scalar fields a part's payloads commonly
hold as typed columns of the struct `payload_fields` (the Parquet "shredding" idea, without the
variant beside it), one column per field and type, named `{path}|{kind}`:

- `i`: an integer that fits a long (BIGINT),
- `d{s}`: a number written with s (1..15) digits after the point, no exponent, at most 15 digits
  in all (DECIMAL(18, s): its double is the correctly rounded one),
- `s`: a string.

Paths are keys only, up to `SHRED_DEPTH` objects deep (`site.id`). A typed value is set only where
it is exactly what Spark's `try_parse_json` of the same bytes holds at that path, of that type
(a decimal's scale is its text's; Spark strips trailing zeros: the same number), and only in documents
Spark parses the same way Python does: anything uncertain (invalid UTF-8, NaN, duplicate keys,
surrogate escapes, integers beyond a long, long number texts, very deep or large documents)
leaves the whole row untyped. A NULL typed column therefore means "read the payload", never
"absent": `spark.rules.native` reads a path's typed column first and parses only rows without one.

pyarrow and the standard library only: the compactor runs without Spark.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

PAYLOAD_FIELDS = "payload_fields"
SHRED_FIELDS = 32  # at most this many typed columns per part
SHRED_SHARE = 0.05  # a field and type held by at least this share of the rows
SHRED_DEPTH = 3  # levels of objects whose fields are typed
SAMPLE_ROWS = 20_000  # rows a part's fields are chosen from (its first)

MAX_PAYLOAD = 1 << 20  # larger payloads are left to parse_json
MAX_DEPTH = 64  # Jackson allows 1000 levels; deeper documents are left to parse_json
MAX_NUMBER_TEXT = 100  # Jackson refuses number texts past 1000 characters
MAX_KEY = 1000  # Jackson refuses names past 50,000 characters
_DIGITS = 15
_LONG = 1 << 63
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _NotExact(Exception):
    """Spark might read this document otherwise: its row stays untyped."""


class _Float(str):
    """The text of a JSON number with a fraction or an exponent (its type depends on the text)."""

    __slots__ = ()


def _refuse_constant(name: str) -> object:
    raise _NotExact(name)  # NaN, Infinity: Jackson refuses them


# C-level hooks only: objects arrive as tuples of (key, value) pairs (duplicates kept, so they can
# be seen), numbers with a fraction or exponent as their text.
_DECODER = json.JSONDecoder(
    object_pairs_hook=tuple, parse_float=_Float, parse_constant=_refuse_constant
)


def _decimal_kind(text: str) -> str | None:
    """`d{scale}` for a plain decimal text of at most `_DIGITS` digits and scale 1.._DIGITS."""
    if "e" in text or "E" in text or len(text) > _DIGITS + 2:
        return None
    whole, _, fraction = text.lstrip("-").partition(".")
    scale = len(fraction)
    precision = len((whole + fraction).lstrip("0")) or 1  # BigDecimal's: of the unscaled value
    if 1 <= scale <= _DIGITS and precision <= _DIGITS:
        return f"d{scale}"
    return None


def _nameable(key: str) -> bool:
    return bool(key) and "." not in key and "|" not in key and len(key) <= 64


class _Walker:
    """One document's typed leaves, and the checks that make them exact. Only what could make
    Spark's parse fail or differ is checked: a value Spark reads otherwise (an integer beyond a
    long, a long decimal) is simply not typed."""

    __slots__ = ("leaves",)

    def __init__(self) -> None:
        self.leaves: list[tuple[str, object]] = []

    def obj(self, pairs: tuple[tuple[str, Any], ...], prefix: str | None, depth: int) -> None:
        """An object's checks, and with a `prefix` (its path, within `SHRED_DEPTH`) its leaves."""
        if depth > MAX_DEPTH:
            raise _NotExact("too deep")
        if len(dict(pairs)) != len(pairs):
            raise _NotExact("a duplicate key")  # parse_json refuses it
        typed = prefix is not None and depth <= SHRED_DEPTH
        leaves = self.leaves
        for key, item in pairs:
            if len(key) > MAX_KEY:
                raise _NotExact("a long key")
            kind = type(item)
            if kind is int:
                if typed and -_LONG <= item < _LONG and _nameable(key):
                    leaves.append((f"{prefix}{key}|i", item))
            elif kind is str:
                if typed and _nameable(key):
                    leaves.append((f"{prefix}{key}|s", item))
            elif kind is _Float:
                if len(item) > MAX_NUMBER_TEXT:
                    raise _NotExact("a long number")
                if typed and _nameable(key):
                    decimal = _decimal_kind(item)
                    if decimal is not None:
                        leaves.append((f"{prefix}{key}|{decimal}", item))
            elif kind is tuple:
                self.obj(item, f"{prefix}{key}." if typed and _nameable(key) else None, depth + 1)
            elif kind is list:
                self.array(item, depth + 1)

    def array(self, items: Iterable[Any], depth: int) -> None:
        """The checks of values outside typed paths (array items, deep fields)."""
        if depth > MAX_DEPTH:
            raise _NotExact("too deep")
        for item in items:
            kind = type(item)
            if kind is tuple:
                self.obj(item, None, depth + 1)
            elif kind is list:
                self.array(item, depth + 1)
            elif kind is _Float and len(item) > MAX_NUMBER_TEXT:
                raise _NotExact("a long number")


def typed_leaves(payload: bytes | None) -> list[tuple[str, object]] | None:
    """The typed fields of one payload, `[(column name, value)]` (a decimal's value as its text),
    or None where Spark might read the document otherwise."""
    if payload is None or len(payload) > MAX_PAYLOAD:
        return None
    try:
        text = payload.decode("utf-8")
        if "\\u" in text and _SURROGATE_ESCAPE.search(text):
            return None  # a lone surrogate reads differently; pairs are rare enough to skip
        node = _DECODER.decode(text)
        walker = _Walker()
        if type(node) is tuple:
            walker.obj(node, "", 1)
        elif type(node) is list:
            walker.array(node, 1)
    except (ValueError, _NotExact, RecursionError):
        return None  # json's errors are ValueErrors
    return walker.leaves


def field_type(name: str) -> pa.DataType:
    """The Arrow type of a `payload_fields` column."""
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


def common_fields(rows: Sequence[list[tuple[str, object]] | None]) -> list[str]:
    """The columns held by at least `SHRED_SHARE` of the rows, at most `SHRED_FIELDS` of them."""
    counts: dict[str, int] = {}
    for leaves in rows:
        for name, _ in leaves or ():
            counts[name] = counts.get(name, 0) + 1
    least = max(1, int(SHRED_SHARE * len(rows)))
    common = sorted((n for n, c in counts.items() if c >= least), key=lambda n: (-counts[n], n))
    return sorted(without_case_twins(common[:SHRED_FIELDS]))


def without_case_twins(names: Iterable[str]) -> list[str]:
    """The names no other name equals but for case: Spark resolves struct fields ignoring case
    (`spark.sql.caseSensitive` is off), so `B|i` beside `b|i` would be ambiguous, or worse, one
    read for the other. Neither is kept."""
    names = list(names)
    seen: dict[str, int] = {}
    for name in names:
        seen[name.lower()] = seen.get(name.lower(), 0) + 1
    return [name for name in names if seen[name.lower()] == 1]


def _decimals(texts: list[str | None], scale: int) -> pa.Array:
    """DECIMAL(18, scale) from plain decimal texts of that scale (None: NULL), built from the
    unscaled integers (pyarrow converts Python Decimals one by one, slowly)."""
    valid = np.array([t is not None for t in texts], dtype=bool)
    unscaled = np.array([int(t.replace(".", "")) if t is not None else 0 for t in texts], np.int64)
    words = np.empty(2 * len(texts), np.int64)
    words[0::2] = unscaled
    words[1::2] = np.where(unscaled < 0, -1, 0)  # the high word: the sign extended
    validity = pa.array(valid).buffers()[1] if not valid.all() else None
    return pa.Array.from_buffers(
        pa.decimal128(18, scale), len(texts), [validity, pa.py_buffer(words.tobytes())]
    )


def shred(
    payloads: Sequence[bytes | None], fields: list[str] | None = None
) -> tuple[pa.StructArray | None, list[str]]:
    """The `payload_fields` column of these payloads and its field names: `fields` where given
    (a part keeps the fields of its first batch), else the common ones of the first
    `SAMPLE_ROWS` rows. (None, []) where no field is common."""
    # The parse makes a few small containers per row and keeps none: the cyclic collector would
    # walk the growing columns again and again (half the time, measured) for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        sample: list[list[tuple[str, object]] | None] = []
        if fields is None:
            sample = [typed_leaves(p) for p in payloads[:SAMPLE_ROWS]]
            fields = common_fields(sample)
        if not fields:
            return None, []
        columns: dict[str, list[Any]] = {name: [None] * len(payloads) for name in fields}
        for row, payload in enumerate(payloads):
            leaves = sample[row] if row < len(sample) else typed_leaves(payload)
            for name, value in leaves or ():
                column = columns.get(name)
                if column is not None:
                    column[row] = value
    finally:
        if collecting:
            gc.enable()
    arrays = []
    for name in fields:
        kind = typed_field_path(name)[1]
        if kind.startswith("d"):
            arrays.append(_decimals(columns[name], int(kind[1:])))
        else:
            arrays.append(pa.array(columns[name], field_type(name)))
    return pa.StructArray.from_arrays(arrays, names=fields), fields
