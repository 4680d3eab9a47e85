"""One tenant's archived rows of a time range as a DuckDB view (`archive_rows`), read where they
lie: the objects the marker protocol names (`common.archive.files.archive_files`: history parts,
live segments not compacted yet, version 1 segments), filtered to the tenant and the range
before anything else sees them.

A `file://` store (the embedded default) is read by DuckDB's own Parquet reader, in parallel,
only the columns a query needs. Any other store (`s3://`) and version 1 NDJSON segments are read
through `common.stores.object_store` into Arrow (`archive_io.iter_archive`) and handed to DuckDB: held in
the web process's memory, so at most `REMOTE_MAX_BYTES` of the tenant's rows (beyond, the
preview is refused: a run reads any range on Spark, piece by piece).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from common.archive.files import ArchiveChanged, archive_files, iter_archive
from common.archive.schema import ARCHIVE_SCHEMA
from common.rule_preview.native import literal
from common.stores.object_store import ObjectStore

VIEW = "archive_rows"
# DuckDB's names for the archive's Arrow types (a column every file lacks is NULL of its type).
_DUCK_TYPES = {
    "string": "VARCHAR",
    "timestamp[ms, tz=UTC]": "TIMESTAMPTZ",
    "int8": "TINYINT",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "bool": "BOOLEAN",
    "binary": "BLOB",
    "list<item: struct<key: string, value: string>>": "STRUCT(key VARCHAR, value VARCHAR)[]",
}
COLUMNS = list(ARCHIVE_SCHEMA.names)
REMOTE_MAX_BYTES = 512 * 1024 * 1024  # a preview's rows read from a remote store, in Arrow


class PreviewTooLong(Exception):
    """The range holds more than a preview reads (in its time, or in memory): narrow it, or run
    the rule."""


def _local_root(store: ObjectStore) -> Path | None:
    root = getattr(store, "root", None)
    return Path(root) if root is not None else None


@contextlib.contextmanager
def watched_scan(
    store: ObjectStore, tenant: str, start: datetime, end: datetime, *, seconds: float, memory: str
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB connection with the tenant's archive of [start, end) open as VIEW (`open_scan`),
    interrupted if it runs past 3 × `seconds` + 10 (a watchdog), closed after."""
    con = duckdb.connect()
    watchdog = threading.Timer(3 * seconds + 10, con.interrupt)
    watchdog.daemon = True
    watchdog.start()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET memory_limit = '{memory}'")
        open_scan(con, store, tenant, start, end)
        yield con
    finally:
        watchdog.cancel()
        con.close()


def open_scan(
    con: duckdb.DuckDBPyConnection,
    store: ObjectStore,
    tenant: str,
    start: datetime,
    end: datetime,
) -> None:
    """Create the view `archive_rows` (the archive's columns, the tenant's rows of [start,
    end)) on `con` (whose TimeZone is UTC)."""
    window = f"ts >= {_instant(start)} AND ts < {_instant(end)}"
    scope = f"tenant = {literal(tenant)} AND {window}"
    root = _local_root(store)
    parts: list[str] = []
    if root is None:
        con.register("_archive_arrow", _remote_rows(store, tenant, start, end))
        parts.append(f"SELECT {', '.join(COLUMNS)} FROM _archive_arrow")
    else:
        files = archive_files(store, start, end, tenant)
        parquet = [str(root / f.key) for f in files if f.format == "parquet"]
        ndjson = [f for f in files if f.format == "ndjson"]
        if parquet:
            source = f"read_parquet([{', '.join(literal(p) for p in parquet)}], union_by_name=true)"
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            select = ", ".join(
                name if name in present else f"CAST(NULL AS {_type(name)}) AS {name}"
                for name in COLUMNS
            )
            parts.append(f"SELECT {select} FROM {source} WHERE {scope}")
        if ndjson:
            from common.archive.files import read_file

            tables = [read_file(store, f) for f in ndjson]
            con.register("_archive_v1", pa.concat_tables(tables))
            parts.append(f"SELECT {', '.join(COLUMNS)} FROM _archive_v1 WHERE {scope}")
    if not parts:
        empty = ", ".join(f"CAST(NULL AS {_type(name)}) AS {name}" for name in COLUMNS)
        parts.append(f"SELECT {empty} WHERE false")
    con.execute(f"CREATE OR REPLACE TEMP VIEW {VIEW} AS " + " UNION ALL ".join(parts))


def _remote_rows(store: ObjectStore, tenant: str, start: datetime, end: datetime) -> pa.Table:
    for attempt in range(3):  # from the listing again when a compaction moved files meanwhile
        try:
            return _remote_rows_once(store, tenant, start, end)
        except ArchiveChanged:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _remote_rows_once(store: ObjectStore, tenant: str, start: datetime, end: datetime) -> pa.Table:
    tables, held = [], 0
    for table in iter_archive(store, start, end, tenant):
        held += table.nbytes
        if held > REMOTE_MAX_BYTES:
            raise PreviewTooLong(
                f"the range holds more than {REMOTE_MAX_BYTES // 2**20} MB of your messages in "
                "the object store, more than a preview reads: narrow it, or start a run (mode "
                "run), which reads any range"
            )
        tables.append(table)
    return pa.concat_tables(tables) if tables else ARCHIVE_SCHEMA.empty_table()


def _type(name: str) -> str:
    return _DUCK_TYPES[str(ARCHIVE_SCHEMA.field(name).type)]


def _instant(moment: datetime) -> str:
    # Integer microseconds: no float rounding at the range's edges (the session is in UTC).
    micros = int(moment.timestamp()) * 1_000_000 + moment.microsecond
    return f"make_timestamp({micros}::BIGINT)::TIMESTAMPTZ"
