"""Reading the message archive into Spark (the I/O edge of every rule job).

Follows the layout protocol of `common.archive_schema`: an hour is read from the tenant's history
files when its live folder carries the `_COMPACTED` marker (or has no live segments), and from the
live segments otherwise — never both. Only the given tenants' history prefixes are listed, and the
rows are filtered to those tenants before anything else sees them, so a plan built from here holds
no other tenant's rows by construction.

Paths: a `file://` object store (the embedded default) is read as local files. An `s3://` store is
read as `s3a://bucket/prefix/...`, which needs the cluster's S3 connector (hadoop-aws is not in the
pyspark wheel and nothing is fetched at run time).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from common.archive_schema import (
    ARCHIVE_PREFIX,
    ARCHIVE_SCHEMA,
    COMPACTED_MARKER,
    LIVE_PREFIX,
    hour_partition,
    read_ndjson_segment,
)
from common.object_store import LocalObjectStore, ObjectStore, S3ObjectStore

HOUR_MS = 3_600_000


def spark_schema() -> StructType:
    """ARCHIVE_SCHEMA as Spark sees it (timestamp ms UTC → TimestampType, int8 → ByteType)."""
    return from_arrow_schema(ARCHIVE_SCHEMA)


def store_path(store: ObjectStore, key: str = "") -> str:
    """The URI Spark reads an object store key at."""
    if isinstance(store, LocalObjectStore) or hasattr(store, "root"):
        # Not Path.as_uri(): Hadoop would read its %3D for `=` literally.
        return f"file://{(store.root / key) if key else store.root}"
    if isinstance(store, S3ObjectStore) or hasattr(store, "bucket"):
        base = f"s3a://{store.bucket}/{store.prefix}".rstrip("/")
        return f"{base}/{key}" if key else base
    raise TypeError(f"unsupported object store {store!r}")


def hours(start_ms: int, end_ms: int) -> list[int]:
    """Start (ms) of every UTC hour overlapping [start_ms, end_ms)."""
    first = start_ms - start_ms % HOUR_MS
    return list(range(first, end_ms, HOUR_MS)) if end_ms > start_ms else []


@dataclass
class HourFiles:
    hour_ms: int
    parquet: list[str] = field(default_factory=list)  # keys
    ndjson: list[str] = field(default_factory=list)  # version 1 segments
    live: bool = False  # read from the live segments (rows of every tenant: filter!)


def list_hour(store: ObjectStore, tenants: Iterable[str], hour_ms: int) -> HourFiles:
    """What to read for one hour, per the protocol (history when compacted, else live)."""
    partition = hour_partition(hour_ms)
    live_keys = store.list(f"{LIVE_PREFIX}/{partition}/")
    compacted = any(k.endswith("/" + COMPACTED_MARKER) for k in live_keys)
    segments = [k for k in live_keys if k.endswith(".parquet")]
    files = HourFiles(hour_ms)
    if segments and not compacted:
        files.live = True
        files.parquet = segments
        return files
    for tenant in sorted(set(tenants)):
        for key in store.list(f"{ARCHIVE_PREFIX}/tenant={tenant}/{partition}/"):
            if key.endswith(".parquet"):
                files.parquet.append(key)
            elif key.endswith(".ndjson.gz"):
                files.ndjson.append(key)
    return files


def empty_archive(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], spark_schema())


def read_archive(
    spark: SparkSession,
    store: ObjectStore,
    tenants: Iterable[str],
    start_ms: int,
    end_ms: int,
    listing: list[HourFiles] | None = None,
) -> DataFrame:
    """The given tenants' archive rows with start_ms ≤ ts < end_ms."""
    tenants = sorted(set(tenants))
    if not tenants:
        return empty_archive(spark)
    if listing is None:
        listing = [list_hour(store, tenants, h) for h in hours(start_ms, end_ms)]
    parquet = [store_path(store, k) for files in listing for k in files.parquet]
    frames = []
    if parquet:
        frames.append(spark.read.schema(spark_schema()).parquet(*parquet))
    ndjson = [k for files in listing for k in files.ndjson]
    if ndjson:
        frames.append(_ndjson_frame(spark, store, ndjson, tenants))
    if not frames:
        return empty_archive(spark)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df.where(tenant_scope(tenants) & time_range(start_ms, end_ms))


def tenant_scope(tenants: Iterable[str]) -> Column:
    return F.col("tenant").isin(sorted(set(tenants)))


def time_range(start_ms: int, end_ms: int) -> Column:
    start = datetime.fromtimestamp(start_ms / 1000, UTC)
    end = datetime.fromtimestamp(end_ms / 1000, UTC)
    return (F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end))


def _ndjson_frame(
    spark: SparkSession, store: ObjectStore, keys: list[str], tenants: list[str]
) -> DataFrame:
    # Version 1 segments are small and few (nothing writes them any more): read on the driver.
    tables = []
    for key in keys:
        table = read_ndjson_segment(store.get(key))
        tables.append(table.filter(pc.is_in(table["tenant"], pa.array(tenants))))
    return spark.createDataFrame(pa.concat_tables(tables))


def live_stream(spark: SparkSession, store: ObjectStore, max_file_age: str = "1h") -> DataFrame:
    """The live segments of every broker as a stream (file source, Parquet, schema given).

    Only `*.parquet` objects: the markers and a local store's `.partial` files are never read.
    `maxFileAge` bounds what a first start (no checkpoint) picks up from before it."""
    return (
        spark.readStream.schema(spark_schema())
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .option("maxFileAge", max_file_age)
        .parquet(store_path(store, LIVE_PREFIX))
    )


def iso_to_ms(text: str) -> int:
    """An ISO 8601 instant (naive means UTC) as epoch milliseconds."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def ms_to_iso(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat()
