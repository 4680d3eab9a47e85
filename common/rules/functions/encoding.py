"""Data encodings: digests (`md5`, `sha256`, `hash`, `hash_to_range`, `map_to_range`),
compression (`gzip`, `zip`, `zip_compress` and their inverses, whose output is bounded:
MAX_INFLATED, against decompression bombs), base64 and JSON text, and UUIDs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import uuid
import zlib
from typing import Any

from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import _bad, _int, _register, _show, _text
from common.rules.values import from_bytes, json_encode, loads, to_bytes, to_str

MAX_INFLATED = 16 << 20  # gunzip/unzip output bound (decompression bombs)


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
