"""The archive tap's columns as Arrow rows (`ARCHIVE_SCHEMA`): what the archive's builder thread
turns a hand-off into before writing it (`parquet_archive.write_row_groups`). Numbers and
payloads are wrapped, not converted (the payload column is a view over the tap's own buffer);
the publisher columns come from the batch's small table of publishers; the broker's own
messages are left out here, off the event loop; a batch comes as chunks of at most `CHUNK_ROWS`
publishes and `CHUNK_PAYLOAD_BYTES` of payloads (a row group each)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.archive.schema import ARCHIVE_SCHEMA, EVENT_PUBLISH, USER_PROPERTY
from data_plane.storage.archive_columns import PublishColumns, publish_columns

# Rows per row group at most (the tap hands over fewer, a few times a second): converted and
# encoded holding the GIL a few ms at most.
CHUNK_ROWS = 16384
_TS = pa.timestamp("ms", tz="UTC")

# Payload bytes per row group at most: bounded so the 32-bit offsets of Arrow's binary type hold.
CHUNK_PAYLOAD_BYTES = 64 * 1024 * 1024


def publish_rows(messages: list[tuple[float, Any]]) -> pa.RecordBatch:
    """`(received, Message)` pairs as the archive's publish rows, built exactly as the tap's
    worker builds them; for callers outside the publish path (tests, tools)."""
    columns = publish_columns(messages)
    with _values(columns) as (payloads, topics):
        return _publish_batch(columns, 0, len(columns), payloads, topics)


# Publish properties kept in their own columns (MQTT 5 names → archive columns).
_PROPERTY_COLUMNS = {
    "payload_format": "payload_format_indicator",
    "content_type": "content_type",
    "message_expiry": "message_expiry_interval",
    "response_topic": "response_topic",
    "correlation_data": "correlation_data",
}


def _fixed_width(data: Any, type_: pa.DataType, start: int, stop: int) -> pa.Array:
    """A slice of a numeric column (`archive_columns`: a `Buffer`, an `array` or a `bytearray`,
    whose len() counts items) as an Arrow array over the same memory (no copy)."""
    whole = pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])
    return whole.slice(start, stop - start)


class _Values:
    """Variable-width values back to back in one buffer (payloads, or the C recorder's UTF-8
    topics) and each one's size, cut into row groups' columns without copying (the worker's;
    `close()` before `PublishColumns.release()`)."""

    def __init__(self, sizes: Any, data: memoryview, count: int, type_: pa.DataType) -> None:
        ends = pc.cumulative_sum(_fixed_width(sizes, pa.uint32(), 0, count).cast(pa.int64()))
        self.offsets = pa.concat_arrays([pa.array([0], pa.int64()), ends])
        self._at = memoryview(self.offsets.buffers()[1]).cast("q")  # a fresh array: no offset
        self._data: pa.Buffer | None = pa.py_buffer(data)
        self._type = type_

    @classmethod
    def payloads(cls, columns: PublishColumns) -> _Values:
        return cls(columns.payload_size, columns.view(columns.payload), len(columns), pa.binary())

    @classmethod
    def topics(cls, columns: PublishColumns) -> _Values | None:
        """The C recorder's topics (the Python one keeps `str`s: None)."""
        if not columns.native:
            return None
        return cls(columns.topic_size, columns.view(columns.topic), len(columns), pa.string())

    def bounds(self, total: int) -> Iterator[tuple[int, int]]:
        """Row groups of at most `CHUNK_ROWS` rows and `CHUNK_PAYLOAD_BYTES` of values (a
        larger value is a group of its own)."""
        at, start = self._at, 0
        while start < total:
            last = min(start + CHUNK_ROWS, total)
            stop = bisect_right(at, at[start] + CHUNK_PAYLOAD_BYTES, start + 1, last + 1) - 1
            stop = max(stop, start + 1)
            yield start, stop
            start = stop

    def column(self, start: int, stop: int) -> pa.Array:
        """Rows `start:stop`'s values: an Arrow binary (or string) array over the buffer itself."""
        assert self._data is not None
        base, end = self._at[start], self._at[stop]
        offsets = pc.subtract(self.offsets.slice(start, stop - start + 1), base).cast(pa.int32())
        data = self._data.slice(base, end - base)
        return pa.Array.from_buffers(self._type, stop - start, [None, offsets.buffers()[1], data])

    def close(self) -> None:
        self._at.release()
        self._data = None


def publish_batch(
    columns: PublishColumns,
    start: int,
    stop: int,
    payload: pa.Array,
    topic: pa.Array | None = None,
) -> pa.RecordBatch:
    """Rows `start:stop` of the tap's columns as `message.publish` rows (ARCHIVE_SCHEMA), with
    their payload column (`_Values.column`); the broker's own (`$SYS`, `$events`: client ids
    starting with `$`) left out here, not on the loop.

    Numbers, payloads and the C recorder's topics (`topic`, from `_Values.topics`) are wrapped,
    not converted; the publisher columns are taken from the batch's table of publishers; the
    Python recorder's topic strings are converted in one C-level pass."""
    n = stop - start
    ts = pc.multiply(_fixed_width(columns.received, pa.float64(), start, stop), 1000.0)
    # The publisher columns: the batch's small table of publishers, taken row by row.
    rows = _fixed_width(columns.publisher, pa.uint32(), start, stop)
    table = columns.publishers
    tenants = pa.array([t for t, _, _ in table], pa.string()).take(rows)
    clients = pa.array([c for _, c, _ in table], pa.string()).take(rows)
    username = pa.array([f"{t}/{d}" if d else None for t, _, d in table], pa.string()).take(rows)
    out: dict[str, pa.Array] = {
        "event": pa.repeat(pa.scalar(EVENT_PUBLISH, pa.string()), n),
        "tenant": tenants,
        "ts": pc.cast(ts, pa.int64(), safe=False).cast(_TS),
        "client_id": clients,
        "username": username,
        "topic": topic if topic is not None else pa.array(columns.topic[start:stop], pa.string()),
        "qos": _fixed_width(columns.qos, pa.uint8(), start, stop).cast(pa.int8()),
        "retain": pc.not_equal(_fixed_width(columns.retain, pa.uint8(), start, stop), 0),
        "payload": payload,
    }
    # Properties are rare: fill the property columns only where a message has any.
    where = [i for i in columns.properties if start <= i < stop]
    if where:
        for column, prop in _PROPERTY_COLUMNS.items():
            values: list[Any] = [None] * n
            for i in where:
                values[i - start] = columns.properties[i].get(prop)
            out[column] = pa.array(values, ARCHIVE_SCHEMA.field(column).type)
        user_properties: list[Any] = [None] * n
        for i in where:
            pairs = columns.properties[i].get("user_property")
            if pairs:
                user_properties[i - start] = [{"key": k, "value": v} for k, v in pairs]
        out["user_properties"] = pa.array(user_properties, pa.list_(USER_PROPERTY))
    batch = pa.RecordBatch.from_arrays(
        [out[f.name] if f.name in out else pa.nulls(n, f.type) for f in ARCHIVE_SCHEMA],
        schema=ARCHIVE_SCHEMA,
    )
    system = [c[:1] == "$" for _, c, _ in table]
    if not any(system):
        return batch
    return batch.filter(pc.invert(pa.array(system, pa.bool_()).take(rows)))


@contextmanager
def _values(columns: PublishColumns) -> Iterator[tuple[_Values, _Values | None]]:
    """The batch's payloads and (C recorder) topics, given up at the end."""
    payloads, topics = _Values.payloads(columns), _Values.topics(columns)
    try:
        yield payloads, topics
    finally:
        payloads.close()
        if topics is not None:
            topics.close()


def _publish_batch(
    columns: PublishColumns, start: int, stop: int, payloads: _Values, topics: _Values | None
) -> pa.RecordBatch:
    topic = topics.column(start, stop) if topics is not None else None
    return publish_batch(columns, start, stop, payloads.column(start, stop), topic)


def _chunks(columns: PublishColumns, events: list[dict[str, Any]]) -> Iterator[pa.Table]:
    """The batch as tables of at most `CHUNK_ROWS` publishes (a row group each), the lifecycle
    rows with the first. The payload view is given up when the generator ends (then
    `columns.release()` can succeed)."""
    total = len(columns)
    with _values(columns) as (payloads, topics):
        first = True
        for start, stop in payloads.bounds(total) if total else [(0, 0)]:
            batches = [_publish_batch(columns, start, stop, payloads, topics)] if total else []
            if events and first:
                batches.extend(pa.Table.from_pylist(events, schema=ARCHIVE_SCHEMA).to_batches())
            first = False
            yield pa.Table.from_batches(batches, schema=ARCHIVE_SCHEMA)
