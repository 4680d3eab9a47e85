"""The archive's Parquet objects as a Spark data source read through `common.stores.object_store`
(boto3 for `s3://`), for stores Spark's own file source cannot reach: hadoop-aws is not in the
pyspark wheel and nothing is fetched at run time, so `s3a://` paths do not resolve here.

Two readers, one format name (`mqtt_archive_objects`):

- batch (`spark.read.format(...).option("keys", json list)`): the given objects, a partition per
  few objects (the backfill's listing, decided by `spark.archive.list_archive` as for files);
- streaming (`spark.readStream.format(...)`): the brokers' live segments as they land. A segment is
  `archive/live/date=…/hour=…/{writer}-{sequence:010d}.parquet`, and each writer's sequence only
  grows, so the offset is, per writer, the last sequence read: a batch reads the listed segments
  above it. Only the hours of the last `maxAgeHours` (and the next, for clock skew) are listed;
  a writer no longer in that window leaves the offset. A first start reads what the window holds
  (the live job then keeps only the last minute's messages: older ones are a backfill's).

Options: `url` (the store's URL, `s3://bucket/prefix` or `file:///path`), `endpoint` (an S3
endpoint other than AWS's, e.g. moto or MinIO; otherwise boto3's own configuration applies).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from common.archive.schema import (
    HISTORY_SCHEMA,
    LIVE_PREFIX,
    MESSAGE_ID,
    live_hour_prefix,
    message_ids,
)
from common.archive.shredding import PAYLOAD_FIELDS

NAME = "mqtt_archive_objects"
HOUR_MS = 3_600_000
OBJECTS_PER_PARTITION = 4


def open_store(options: dict[str, str]):
    """The object store named by the options (in whichever process reads)."""
    from common.stores.object_store import S3ObjectStore, open_object_store

    url = options["url"]
    endpoint = options.get("endpoint") or None
    if url.startswith("s3://") and endpoint:
        bucket, _, prefix = url[len("s3://") :].partition("/")
        return S3ObjectStore(bucket, prefix, endpoint_url=endpoint)
    return open_object_store(url)


def store_options(store: Any) -> dict[str, str]:
    """The options that reopen `store` in another process."""
    options = {"url": store.url}
    client = getattr(store, "client", None)
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
    if endpoint and "amazonaws.com" not in endpoint:
        options["endpoint"] = endpoint
    return options


class Objects(InputPartition):
    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys


def _partitions(keys: Sequence[str]) -> list[Objects]:
    keys = sorted(keys)
    return [
        Objects(keys[i : i + OBJECTS_PER_PARTITION])
        for i in range(0, len(keys), OBJECTS_PER_PARTITION)
    ]


def _read(options: dict[str, str], schema: StructType, partition: Objects) -> Iterator:
    from pyspark.sql.pandas.types import to_arrow_schema

    from common.stores.object_store import ObjectNotFound

    # Timestamps as UTC instants, as Spark reads the archive's `ts` (pyspark 4.0's keyword; 4.1
    # renamed it `timezone`).
    target = to_arrow_schema(schema, timestamp_utc=True)
    store = open_store(options)
    for key in partition.keys:
        try:
            body = store.get(key)
        except ObjectNotFound:  # compacted away between listing and reading: in history now
            continue
        table = pq.read_table(io.BytesIO(body))
        columns = []
        for field in target:
            if field.name == MESSAGE_ID:  # as stored (history parts), else derived
                derived = message_ids(key, table.num_rows)
                stored = table[MESSAGE_ID] if MESSAGE_ID in table.column_names else None
                columns.append(derived if stored is None else pc.coalesce(stored, derived))
            elif field.name == PAYLOAD_FIELDS:  # the union of the parts' typed fields
                columns.append(_typed_fields(table, field.type))
            elif field.name in table.column_names:
                columns.append(table[field.name].cast(field.type))
            else:
                columns.append(pa.nulls(table.num_rows, field.type))
        yield from pa.Table.from_arrays(columns, schema=target).to_batches()


def _typed_fields(table: pa.Table, target: pa.StructType) -> pa.Array:
    """The part's `payload_fields` as `target` (the union over the parts read): a field this
    part did not type is NULL in its rows, as Spark's Parquet reader gives it locally."""
    rows = table.num_rows
    stored: dict[str, pa.Array] = {}
    if PAYLOAD_FIELDS in table.column_names:
        column = table[PAYLOAD_FIELDS].combine_chunks()
        # flatten: each field NULL where the struct itself is
        stored = dict(zip((f.name for f in column.type), column.flatten(), strict=True))
    children = [
        stored[f.name].cast(f.type) if f.name in stored else pa.nulls(rows, f.type) for f in target
    ]
    return pa.StructArray.from_arrays(children, fields=list(target))


def segment_writer_sequence(key: str) -> tuple[str, int] | None:
    """(writer, sequence) of a live segment key, or None for anything else (markers, …)."""
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".parquet"):
        return None
    writer, sep, sequence = name[: -len(".parquet")].rpartition("-")
    if not sep or not sequence.isdigit():
        return None
    return writer, int(sequence)


class ArchiveObjects(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        # as `spark.archive.history_spark_schema`: the archive's columns and `message_id`
        return from_arrow_schema(HISTORY_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ObjectsReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LiveSegmentsReader(dict(self.options), schema)


class ObjectsReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options, self.schema = options, schema

    def partitions(self) -> Sequence[InputPartition]:
        return _partitions(json.loads(self.options.get("keys", "[]")))

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, self.schema, partition)


class LiveSegmentsReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options, self.schema = options, schema
        self.max_age_hours = int(self.options.get("maxAgeHours", "1"))
        self._listing: dict[str, tuple[str, int]] = {}
        self._store = None

    def store(self):
        if self._store is None:
            self._store = open_store(self.options)
        return self._store

    def hours(self) -> list[str]:
        now = int(time.time() * 1000)
        return [live_hour_prefix(now + step * HOUR_MS) for step in range(-self.max_age_hours, 2)]

    def _list(self, hours: Sequence[str]) -> dict[str, tuple[str, int]]:
        listing = {}
        for prefix in hours:
            assert prefix.startswith(LIVE_PREFIX)
            for key in self.store().list(prefix):
                parsed = segment_writer_sequence(key)
                if parsed is not None:
                    listing[key] = parsed
        return listing

    def initialOffset(self) -> dict:
        return {"writers": {}, "hours": []}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        hours = self.hours()
        self._listing = self._list(hours)
        writers: dict[str, int] = {}
        for writer, sequence in self._listing.values():
            writers[writer] = max(sequence, writers.get(writer, -1))
        # a writer of the start offset that has nothing newer keeps its place (while listed)
        if start:
            for writer, sequence in (start.get("writers") or {}).items():
                if writer in writers:
                    writers[writer] = max(writers[writer], sequence)
        return {"writers": writers, "hours": hours}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        before = start.get("writers") or {}
        upto = end.get("writers") or {}
        listing = self._listing or self._list(end.get("hours") or self.hours())
        keys = [
            key
            for key, (writer, sequence) in listing.items()
            if before.get(writer, -1) < sequence <= upto.get(writer, -1)
        ]
        return _partitions(keys)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass  # nothing to acknowledge: the brokers' segments stay until compaction


def register(spark) -> None:
    spark.dataSource.register(ArchiveObjects)
