"""The archive writer, version 2: batches of routed messages and lifecycle events as Parquet
segments in the object store (schema and layout: `common.archive_schema`).

The event loop only appends: each of a message's fields to its column (`PublishColumns`),
nothing copied, decoded or converted. Every interval the tap swaps the columns and hands them to
`build_segments`, which runs in a worker thread: it turns them into Arrow arrays (in chunks),
drops tenants whose archive is off, groups rows by tenant, splits at hour boundaries and encodes
each hour as one Parquet file. Uploads run in a second worker thread, in order.

When the store is unavailable, encoded segments wait in memory up to `max_pending_bytes`; beyond
that the oldest are dropped and counted (`dropped_records`), and the failure is logged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.archive_io import ParquetBytesWriter
from common.archive_schema import (
    ARCHIVE_SCHEMA,
    EVENT_PUBLISH,
    USER_PROPERTY,
    live_segment_key,
)
from common.object_store import ObjectStore

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
# Rows converted per GIL hold (a few ms): short enough not to stall the event loop, long enough
# for few hand-offs (each may wait for the OS scheduler when the machine is busy).
CHUNK_ROWS = 16384
_TS = pa.timestamp("ms", tz="UTC")


@dataclass(slots=True)
class Segment:
    key: str
    body: bytes
    records: int


def default_writer_id() -> str:
    # Host, process and start time: a restarted broker (same pid in a container) never
    # overwrites the segments of its predecessor.
    return f"{os.uname().nodename}-{os.getpid()}-{int(time.time() * 1000):x}"


class PublishColumns:
    """One interval's publishes, column by column: what the tap appends on the event loop.

    Column by column, not a tuple per message: appending a reference or a number to a column
    allocates nothing the garbage collector tracks, and the payloads stay the Message's own
    bytes objects (copying them into one growing buffer on the loop cost more than everything
    else in the archive: every second a fresh few hundred MB, page-faulted in on the loop).
    The builder thread copies them once, into Arrow's reused memory pool.
    """

    __slots__ = (
        "received",
        "tenant",
        "client_id",
        "device",
        "topic",
        "qos",
        "retain",
        "payload",
        "properties",
    )

    def __init__(self) -> None:
        self.received = array("d")  # time.time()
        self.tenant: list[str] = []
        self.client_id: list[str] = []
        self.device: list[str] = []
        self.topic: list[str] = []
        self.qos = bytearray()
        self.retain = bytearray()
        self.payload: list[bytes] = []
        self.properties: dict[int, dict[str, Any]] = {}  # row -> properties; most have none

    def __len__(self) -> int:
        return len(self.topic)

    def recorder(self) -> Callable[[Any], None]:
        """The function the tap calls per message: appends with every method bound once."""
        add_received, add_tenant = self.received.append, self.tenant.append
        add_client, add_device = self.client_id.append, self.device.append
        topics, add_topic = self.topic, self.topic.append
        add_qos, add_retain = self.qos.append, self.retain.append
        add_payload, properties = self.payload.append, self.properties
        now = time.time

        def record(m: Any, received: float | None = None) -> None:
            add_received(now() if received is None else received)
            add_tenant(m.tenant)
            add_client(m.publisher)
            add_device(m.device)
            if m.properties:
                properties[len(topics)] = m.properties
            add_topic(m.topic)
            add_qos(m.qos)
            add_retain(m.retain)
            add_payload(m.payload)

        return record


def publish_columns(messages: list[tuple[float, Any]]) -> PublishColumns:
    """`(received, Message)` pairs as the tap records them; for callers outside the publish
    path (tests, tools)."""
    columns = PublishColumns()
    record = columns.recorder()
    for received, message in messages:
        record(message, received)
    return columns


# Publish properties kept in their own columns (MQTT 5 names → archive columns).
_PROPERTY_COLUMNS = {
    "payload_format": "payload_format_indicator",
    "content_type": "content_type",
    "message_expiry": "message_expiry_interval",
    "response_topic": "response_topic",
    "correlation_data": "correlation_data",
}


def _fixed_width(data: array | bytearray, type_: pa.DataType, start: int, stop: int) -> pa.Array:
    """A slice of a numeric column as an Arrow array over the same memory (no copy)."""
    # len() counts elements for both: array("d") in doubles, bytearray in bytes (uint8).
    whole = pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])
    return whole.slice(start, stop - start)


def publish_batch(columns: PublishColumns, start: int, stop: int) -> pa.RecordBatch:
    """Rows `start:stop` of the tap's columns as `message.publish` rows (ARCHIVE_SCHEMA).

    Numbers are wrapped, not converted; strings and payloads are one C-level pass each. This is
    most of what the archive costs per message, so it stays lean."""
    n = stop - start
    ts = pc.multiply(_fixed_width(columns.received, pa.float64(), start, stop), 1000.0)
    tenants = pa.array(columns.tenant[start:stop], pa.string())
    devices = pa.array(columns.device[start:stop], pa.string())
    username = pc.if_else(
        pc.equal(devices, ""),
        pa.scalar(None, pa.string()),
        pc.binary_join_element_wise(tenants, devices, "/"),
    )
    out: dict[str, pa.Array] = {
        "event": pa.repeat(pa.scalar(EVENT_PUBLISH, pa.string()), n),
        "tenant": tenants,
        "ts": pc.cast(ts, pa.int64(), safe=False).cast(_TS),
        "client_id": pa.array(columns.client_id[start:stop], pa.string()),
        "username": username,
        "topic": pa.array(columns.topic[start:stop], pa.string()),
        "qos": _fixed_width(columns.qos, pa.uint8(), start, stop).cast(pa.int8()),
        "retain": pc.not_equal(_fixed_width(columns.retain, pa.uint8(), start, stop), 0),
        "payload": pa.array(columns.payload[start:stop], pa.binary()),
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
    return pa.RecordBatch.from_arrays(
        [out[f.name] if f.name in out else pa.nulls(n, f.type) for f in ARCHIVE_SCHEMA],
        schema=ARCHIVE_SCHEMA,
    )


def _chunks(columns: PublishColumns, events: list[dict[str, Any]]) -> Iterator[pa.Table]:
    """The batch as tables of at most `CHUNK_ROWS` publishes, the lifecycle rows with the first.

    A chunk at a time: a conversion holds the GIL throughout, and the event loop should wait for
    one chunk at most, never for a whole second's batch; and a chunk's memory, freed before the
    next is built, is reused warm instead of a second's worth being faulted in afresh."""
    total = len(columns)
    starts = range(0, total, CHUNK_ROWS) if total else [0]
    for start in starts:
        batches = [publish_batch(columns, start, min(start + CHUNK_ROWS, total))] if total else []
        if events and start == 0:
            batches.extend(pa.Table.from_pylist(events, schema=ARCHIVE_SCHEMA).to_batches())
        yield pa.Table.from_batches(batches, schema=ARCHIVE_SCHEMA)


def build_segments(
    columns: PublishColumns,
    events: list[dict[str, Any]],
    *,
    writer_id: str,
    next_sequence: Callable[[], int],
    enabled_for: Callable[[str], bool] | None = None,
    compression: str = "zstd",
) -> list[Segment]:
    """Encode a batch: one Parquet segment per hour it spans, each chunk's rows (a row group)
    sorted by tenant then time, tenants whose archive is off left out. Runs in a worker thread."""
    off: list[str] = []
    if enabled_for is not None:
        tenants = set(columns.tenant).union(e["tenant"] for e in events)
        off = [t for t in tenants if not enabled_for(t)]
    excluded = pa.array(off, pa.string())
    files: dict[int, ParquetBytesWriter] = {}
    for table in _chunks(columns, events):
        if off:
            table = table.filter(pc.invert(pc.is_in(table["tenant"], excluded)))
        if not table.num_rows:
            continue
        # Publishes arrive in time order: one tenant without lifecycle rows (a busy small
        # broker) needs no sort; otherwise a stable one by tenant and time.
        if events or pc.count_distinct(table["tenant"]).as_py() > 1:
            order = pc.sort_indices(table, [("tenant", "ascending"), ("ts", "ascending")])
            table = table.take(order)
        hours = pc.divide(table["ts"].cast(pa.int64()), HOUR_MS)
        distinct = pc.unique(hours).to_pylist()
        for hour in distinct:
            part = table.filter(pc.equal(hours, hour)) if len(distinct) > 1 else table
            if hour not in files:
                files[hour] = ParquetBytesWriter(compression=compression)
            files[hour].write(part)
    segments = []
    for hour in sorted(files):
        rows = files[hour].rows
        key = live_segment_key(hour * HOUR_MS, writer_id, next_sequence())
        segments.append(Segment(key, files[hour].close(), rows))
    return segments


class ParquetArchiveWriter:
    """Encoded segments waiting for the object store, bounded; uploads in order."""

    dataset = "archive"

    def __init__(
        self,
        store: ObjectStore,
        *,
        writer_id: str | None = None,
        max_pending_bytes: int = 64 * 1024 * 1024,
        compression: str = "zstd",
    ) -> None:
        self.store = store
        self.writer_id = writer_id or default_writer_id()
        self.max_pending_bytes = max_pending_bytes
        self.compression = compression
        self._pending: list[Segment] = []
        self._pending_bytes = 0
        self._uploading: Segment | None = None  # never dropped: it may be landing right now
        self._sequence = 0
        self._lock = threading.Lock()  # the builder thread adds while the uploader takes
        self.written_records = 0
        self.dropped_records = 0
        self.upload_failures = 0

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def encode(
        self,
        columns: PublishColumns,
        events: list[dict[str, Any]],
        enabled_for: Callable[[str], bool] | None = None,
    ) -> int:
        """Build and queue the segments of a batch (worker thread); returns rows queued."""
        segments = build_segments(
            columns,
            events,
            writer_id=self.writer_id,
            next_sequence=self._next_sequence,
            enabled_for=enabled_for,
            compression=self.compression,
        )
        with self._lock:
            for segment in segments:
                self._pending.append(segment)
                self._pending_bytes += len(segment.body)
            self._drop_over_bound()
        return sum(s.records for s in segments)

    def upload_pending(self) -> int:
        """Upload queued segments in order until done or the store fails (worker thread)."""
        uploaded = 0
        while True:
            with self._lock:
                if not self._pending:
                    break
                segment = self._uploading = self._pending[0]
            try:
                self.store.put(segment.key, segment.body)
            except Exception as exc:
                self.upload_failures += 1
                log.warning(
                    "object store upload of %s failed (%s); %d bytes pending",
                    segment.key,
                    exc,
                    self._pending_bytes,
                )
                self._uploading = None
                break
            with self._lock:
                self._pending.remove(segment)
                self._pending_bytes -= len(segment.body)
                self._uploading = None
            uploaded += segment.records
            self.written_records += segment.records
        return uploaded

    def _drop_over_bound(self) -> None:
        while self._pending_bytes > self.max_pending_bytes and len(self._pending) > 1:
            index = 1 if self._pending[0] is self._uploading else 0
            if index >= len(self._pending) - 1 and index:
                break  # only the one in flight and the newest are left
            dropped = self._pending.pop(index)
            self._pending_bytes -= len(dropped.body)
            self.dropped_records += dropped.records
            log.error(
                "archive buffer full: dropped segment %s (%d records)", dropped.key, dropped.records
            )
