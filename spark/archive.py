"""Reading the message archive into Spark (the I/O edge of every rule job).

Follows the layout and marker protocol of `common.archive.schema` through
`common.archive.files.archive_files`: for each hour the history parts its `_COMPACTED` marker names
plus the live segments it does not name, and version 1 NDJSON segments — nothing twice. Only the given tenants' history prefixes are listed, and the
rows are filtered to those tenants before anything else sees them, so a plan built from here holds
no other tenant's rows by construction.

Paths: a `file://` object store (the embedded default) is read by Spark's file source as local
files. Any other store (`s3://`) is read through `common.stores.object_store` (boto3) by the Python data
source of `spark.object_source`, batch and streaming: Spark's `s3a://` needs hadoop-aws, which is
not in the pyspark wheel, and nothing is fetched at run time.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from common.archive.files import ArchiveFile, archive_files
from common.archive.footer import parquet_schemas
from common.archive.schema import (
    ARCHIVE_SCHEMA,
    HISTORY_SCHEMA,
    LIVE_PREFIX,
    MESSAGE_ID,
    message_ids,
    read_ndjson_segment,
)
from common.archive.shredding import PAYLOAD_FIELDS, without_case_twins
from common.stores.object_store import LocalObjectStore, ObjectNotFound, ObjectStore, S3ObjectStore
from spark import object_source
from spark.session import in_process


def spark_schema() -> StructType:
    """ARCHIVE_SCHEMA as Spark sees it (timestamp ms UTC → TimestampType, int8 → ByteType)."""
    return from_arrow_schema(ARCHIVE_SCHEMA)


def history_spark_schema() -> StructType:
    """HISTORY_SCHEMA (the archive's columns and `message_id`) as Spark sees it."""
    return from_arrow_schema(HISTORY_SCHEMA)


def history_part_spark_schema(store: ObjectStore, keys: Iterable[str] = ()) -> StructType:
    """What a backfill reads of the history parts at `keys`: HISTORY_SCHEMA and `payload_fields`
    (the typed fields the parts shred, `common.archive.shredding`: the union of the parts' own,
    from their footers, `common.archive.footer`). Objects without it read NULL there: live
    segments, history compacted before it existed."""
    schema = history_spark_schema()
    fields: dict[str, pa.DataType] = {}
    for stored in parquet_schemas(store, keys):
        if PAYLOAD_FIELDS in stored.names:
            for field in stored.field(PAYLOAD_FIELDS).type:
                fields.setdefault(field.name, field.type)
    # Two parts may type `B|i` and `b|i`: Spark would read one for the other (it ignores case).
    fields = {name: fields[name] for name in without_case_twins(fields)}
    if fields:
        typed = pa.schema([pa.field(PAYLOAD_FIELDS, pa.struct(sorted(fields.items())))])
        schema = schema.add(from_arrow_schema(typed)[PAYLOAD_FIELDS])
    return schema


# `common.archive.schema.message_id_prefix` on the path Spark read a row from: a live segment's
# file name, any other object's key below `archive/` (greedy: the store's own root may hold an
# `archive` folder too), without the extension.
_LIVE_NAME = r"/archive/live/(?:[^/]+/)*([^/]+)\.parquet$"
_OTHER_KEY = r"^.*/archive/(tenant=.+)\.(?:parquet|ndjson\.gz)$"


def derived_message_id(path: Column, row: Column) -> Column:
    """The message id of the row at position `row` of the file at `path` (archive_schema)."""
    live = F.regexp_extract(path, _LIVE_NAME, 1)
    prefix = F.when(live != F.lit(""), live).otherwise(F.regexp_extract(path, _OTHER_KEY, 1))
    return F.concat(prefix, F.lit(":"), row.cast("string"))


def with_message_ids(frame: DataFrame) -> DataFrame:
    """A file-source frame with `message_id` as stored, or derived from the file and row."""
    derived = derived_message_id(F.col("_metadata.file_path"), F.col("_metadata.row_index"))
    stored = F.col(MESSAGE_ID) if MESSAGE_ID in frame.columns else F.lit(None).cast("string")
    return frame.withColumn(MESSAGE_ID, F.coalesce(stored, derived))


def store_path(store: ObjectStore, key: str = "") -> str:
    """The URI Spark reads an object store key at."""
    if isinstance(store, LocalObjectStore) or hasattr(store, "root"):
        # Not Path.as_uri(): Hadoop would read its %3D for `=` literally.
        return f"file://{(store.root / key) if key else store.root}"
    if isinstance(store, S3ObjectStore) or hasattr(store, "bucket"):
        base = f"s3a://{store.bucket}/{store.prefix}".rstrip("/")
        return f"{base}/{key}" if key else base
    raise TypeError(f"unsupported object store {store!r}")


def list_archive(
    store: ObjectStore, tenants: Iterable[str], start_ms: int, end_ms: int
) -> list[ArchiveFile]:
    """The objects holding the tenants' rows of [start_ms, end_ms), per the marker protocol
    (`common.archive.files.archive_files`, one tenant at a time: only their history prefixes are
    listed). A shared live segment is listed once however many of the tenants it holds."""
    start, end = _dt(start_ms), _dt(end_ms)
    files: dict[str, ArchiveFile] = {}
    for tenant in sorted(set(tenants)):
        for file in archive_files(store, start, end, tenant=tenant):
            files.setdefault(file.key, file)
    return sorted(files.values(), key=lambda f: (f.hour, f.key))


def empty_archive(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], history_spark_schema())


def read_archive(
    spark: SparkSession,
    store: ObjectStore,
    tenants: Iterable[str],
    start_ms: int,
    end_ms: int,
    listing: list[ArchiveFile] | None = None,
) -> DataFrame:
    """The given tenants' archive rows with start_ms ≤ ts < end_ms (rows of any other tenant in a
    shared live segment are filtered out here, before anything else sees them), each with its
    `message_id` (archive_schema, "Message ids")."""
    tenants = sorted(set(tenants))
    if not tenants:
        return empty_archive(spark)
    if listing is None:
        listing = list_archive(store, tenants, start_ms, end_ms)
    parquet = [f.key for f in listing if f.format == "parquet"]
    frames = []
    if parquet:
        # the typed fields of the tenants' own parts (a shared live segment has none)
        history = [f.key for f in listing if f.format == "parquet" and not f.shared]
        schema = history_part_spark_schema(store, history)
    if parquet and _local(store):
        paths = [store_path(store, key) for key in parquet]
        frames.append(with_message_ids(spark.read.schema(schema).parquet(*paths)))
    elif parquet:
        object_source.register(spark)
        frames.append(
            spark.read.format(object_source.NAME)
            .schema(schema)
            .options(**object_source.store_options(store))
            .option("keys", json.dumps(parquet))
            .load()
        )
    ndjson = [f.key for f in listing if f.format == "ndjson"]
    if ndjson:
        frames.append(_ndjson_frame(spark, store, ndjson, tenants))
    if not frames:
        return empty_archive(spark)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other, allowMissingColumns=True)  # payload_fields: NULL
    return df.where(tenant_scope(tenants) & time_range(start_ms, end_ms))


COPY_THREADS = 16  # S3 GETs side by side: a chunk of a month's parts in about a second


@contextmanager
def readable_copy(
    spark: SparkSession, store: ObjectStore, listing: list[ArchiveFile]
) -> Iterator[ObjectStore]:
    """A store holding the listed objects that Spark's own Parquet reader reads: `store` itself
    when it is local, or when the executors run outside the driver's JVM (a cluster, and
    `local-cluster[…]`: they read S3 through `spark.object_source`, for nothing an executor reads
    may live only on the driver's disk); else, with Spark in local mode (`local[…]`: the
    rules-runs worker on S3, its executors in its own JVM), a copy of the objects in a temporary
    folder (`TMPDIR`), gone when the block ends.

    Why copy: the object source hands every row of every column through a Python worker
    (boto3, Arrow, then rows), about 30x DuckDB's time on the backfill bench; from local files
    Spark reads only the columns a plan uses, vectorised. The copy takes the same GETs the
    object source would, 16 at a time, and keeps the keys (so each row's `message_id`, derived
    from its object's key, is the same). A backfill copies one chunk at a time (`backfill.py`):
    the disk holds one chunk's objects."""
    if _local(store) or not in_process(spark.sparkContext.master):
        yield store
        return
    folder = Path(tempfile.mkdtemp(prefix="archive-copy-"))
    try:
        copy = LocalObjectStore(folder)

        def fetch(key: str) -> None:
            try:
                copy.put(key, store.get(key))
            except ObjectNotFound:  # compacted away since the listing: as the reader skips it
                pass

        with ThreadPoolExecutor(COPY_THREADS) as pool:
            list(pool.map(fetch, sorted({f.key for f in listing})))
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
        table = table.append_column(MESSAGE_ID, message_ids(key, table.num_rows))
        tables.append(table.filter(pc.is_in(table["tenant"], pa.array(tenants))))
    return spark.createDataFrame(pa.concat_tables(tables), schema=history_spark_schema())


def _local(store: ObjectStore) -> bool:
    return isinstance(store, LocalObjectStore) or hasattr(store, "root")


def live_stream(spark: SparkSession, store: ObjectStore, max_file_age: str = "1h") -> DataFrame:
    """The live segments of every broker as a stream (Parquet, schema given).

    A local store: Spark's file source; only `*.parquet` objects (the markers and a local store's
    `.partial` files are never read); `maxFileAge` bounds what a first start (no checkpoint)
    picks up from before it. Any other store (`s3://`): `spark.object_source`'s stream, offsets
    per writer's segment sequence, listing the last hours (`max_file_age`, rounded up). Each row
    carries its `message_id` (derived from its segment and position: archive_schema)."""
    if not _local(store):
        object_source.register(spark)
        hours = max(1, -(-_seconds(max_file_age) // 3600))
        return (
            spark.readStream.format(object_source.NAME)
            .options(**object_source.store_options(store))
            .option("maxAgeHours", str(hours))
            .load()
        )
    return with_message_ids(
        spark.readStream.schema(spark_schema())
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .option("maxFileAge", max_file_age)
        .parquet(store_path(store, LIVE_PREFIX))
    )


def _seconds(age: str) -> int:
    """`1h`, `30m`, `90s` (Spark's maxFileAge style) as seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    text = age.strip().lower()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text))


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def iso_to_ms(text: str) -> int:
    """An ISO 8601 instant (naive means UTC) as epoch milliseconds."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def ms_to_iso(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat()
