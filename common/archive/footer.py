"""A Parquet object's schema from its footer alone: the end of the object, fetched with a ranged
read (`ObjectStore.tail`), not the whole of it. A reader on S3 learns which typed payload fields
(`common.archive.shredding`) the history parts hold before it plans, at one small request a part.

A Parquet file ends with its footer (Thrift metadata), the footer's length (4 bytes, little
endian) and `PAR1`; the schema is in the footer, so the object's last 64 KiB almost always hold it
(a part's footer is a few KiB); a longer footer costs a second read, of its size (and at least
the 64 KiB Arrow's reader asks for)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from common.stores.object_store import ObjectNotFound, ObjectStore

# Arrow's footer reader itself reads the last 64 KiB first (its default footer read size), then
# the rest of a longer footer: the tail must hold both.
ARROW_FOOTER_READ = 64 * 1024
FIRST_READ = ARROW_FOOTER_READ
PARALLEL_READS = 16  # S3 answers each in tens of ms: a month of hourly parts in about a second


class _Tail(io.RawIOBase):
    """A file of `size` bytes of which only the last `len(tail)` can be read: all a footer
    reader reads. A read before them is a bug here, not a short file: it raises."""

    def __init__(self, tail: bytes, size: int) -> None:
        self._tail, self._size, self._start, self._at = tail, size, size - len(tail), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = base + offset
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, target: Any) -> int:
        if self._at < self._start:
            raise OSError(f"read at {self._at}, before the tail read ({self._start})")
        chunk = self._tail[self._at - self._start : self._at - self._start + len(target)]
        target[: len(chunk)] = chunk
        self._at += len(chunk)
        return len(chunk)


def parquet_schema(store: ObjectStore, key: str) -> pa.Schema:
    """The schema of the Parquet object at `key`, read from its footer."""
    tail, size = store.tail(key, FIRST_READ)
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise pa.ArrowInvalid(f"{key}: not a Parquet object")
    needed = int.from_bytes(tail[-8:-4], "little") + 8
    if needed > len(tail) and len(tail) < size:
        tail, size = store.tail(key, max(needed, ARROW_FOOTER_READ))
    return pq.read_schema(pa.PythonFile(_Tail(tail, size), mode="r"))


def parquet_schemas(store: ObjectStore, keys: Iterable[str]) -> list[pa.Schema]:
    """The schemas of the objects at `keys` (read side by side); an object gone meanwhile (a
    part rewritten) or not Parquet is left out."""

    def one(key: str) -> pa.Schema | None:
        try:
            return parquet_schema(store, key)
        except (ObjectNotFound, OSError, pa.ArrowInvalid):
            return None

    keys = list(keys)
    if len(keys) <= 1:
        found = [one(key) for key in keys]
    else:
        with ThreadPoolExecutor(min(PARALLEL_READS, len(keys))) as pool:
            found = list(pool.map(one, keys))
    return [schema for schema in found if schema is not None]
