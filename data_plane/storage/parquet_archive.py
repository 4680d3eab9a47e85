"""The archive writer, version 2: batches of routed messages and lifecycle events as Parquet
segments in the object store (schema and layout: `common.archive_schema`).

The event loop only appends: one tuple of the message's fields per publish (`ROW`), nothing
decoded or copied. Every interval the tap swaps the buffer and hands it to `build_segments`, which
runs in a worker thread: it turns the batch into columns (in chunks), drops tenants whose
archive is off, groups rows by tenant, splits at hour boundaries and encodes each hour as one
Parquet file. Uploads run in a second worker thread, in order.

When the store is unavailable, encoded segments wait in memory up to `max_pending_bytes`; beyond
that the oldest are dropped and counted (`dropped_records`), and the failure is logged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.archive_io import encode_parquet
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


# Publish properties kept in their own columns (MQTT 5 names → archive columns).
# What the tap appends per publish: the Message's fields, as they are.
ROW = (
    "received",  # time.time()
    "tenant",
    "client_id",
    "device",
    "topic",
    "qos",
    "retain",
    "payload",
    "properties",  # the Message's properties dict, None when empty
)
_PROPERTY_COLUMNS = {
    "payload_format": "payload_format_indicator",
    "content_type": "content_type",
    "message_expiry": "message_expiry_interval",
    "response_topic": "response_topic",
    "correlation_data": "correlation_data",
}


def publish_batch(rows: list[tuple]) -> pa.RecordBatch:
    """`message.publish` rows (ARCHIVE_SCHEMA) from tuples laid out as `ROW`.

    One list comprehension per column (the fastest pass CPython has) and one conversion each:
    this is most of what the archive costs per message, so it stays lean."""
    n = len(rows)
    ts = pc.multiply(pa.array([r[0] for r in rows], pa.float64()), 1000.0)
    tenants = pa.array([r[1] for r in rows], pa.string())
    devices = pa.array([r[3] for r in rows], pa.string())
    username = pc.if_else(
        pc.equal(devices, ""),
        pa.scalar(None, pa.string()),
        pc.binary_join_element_wise(tenants, devices, "/"),
    )
    columns: dict[str, pa.Array] = {
        "event": pa.repeat(pa.scalar(EVENT_PUBLISH, pa.string()), n),
        "tenant": tenants,
        "ts": pc.cast(ts, pa.int64(), safe=False).cast(_TS),
        "client_id": pa.array([r[2] for r in rows], pa.string()),
        "username": username,
        "topic": pa.array([r[4] for r in rows], pa.string()),
        "qos": pa.array([r[5] for r in rows], pa.int8()),
        "retain": pa.array([r[6] for r in rows], pa.bool_()),
        "payload": pa.array([r[7] for r in rows], pa.binary()),
    }
    # Properties are rare: fill the property columns only where a message has any.
    where = [i for i, r in enumerate(rows) if r[8] is not None]
    if where:
        for column, prop in _PROPERTY_COLUMNS.items():
            values: list[Any] = [None] * n
            for i in where:
                values[i] = rows[i][8].get(prop)
            columns[column] = pa.array(values, ARCHIVE_SCHEMA.field(column).type)
        user_properties: list[Any] = [None] * n
        for i in where:
            pairs = rows[i][8].get("user_property")
            if pairs:
                user_properties[i] = [{"key": k, "value": v} for k, v in pairs]
        columns["user_properties"] = pa.array(user_properties, pa.list_(USER_PROPERTY))
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in ARCHIVE_SCHEMA],
        schema=ARCHIVE_SCHEMA,
    )


def message_row(message: Any, received: float | None = None) -> tuple:
    """A Message as the tap records it (`ROW`); for callers outside the publish path."""
    return (
        time.time() if received is None else received,
        message.tenant,
        message.publisher,
        message.device,
        message.topic,
        message.qos,
        message.retain,
        message.payload,
        message.properties or None,
    )


def build_table(batch: list[tuple], events: list[dict[str, Any]]) -> pa.Table:
    """One Table (ARCHIVE_SCHEMA) of a batch of publishes and lifecycle event rows.

    Built in chunks: a conversion holds the GIL throughout, and the event loop should wait for
    one chunk at most, never for a whole second's batch."""
    batches = []
    for start in range(0, len(batch), CHUNK_ROWS):
        batches.append(publish_batch(batch[start : start + CHUNK_ROWS]))
    if events:
        batches.extend(pa.Table.from_pylist(events, schema=ARCHIVE_SCHEMA).to_batches())
    return pa.Table.from_batches(batches, schema=ARCHIVE_SCHEMA)


def build_segments(
    batch: list[tuple],
    events: list[dict[str, Any]],
    *,
    writer_id: str,
    next_sequence: Callable[[], int],
    enabled_for: Callable[[str], bool] | None = None,
    compression: str = "zstd",
) -> list[Segment]:
    """Encode a batch: one Parquet segment per hour it spans, rows sorted by tenant then time,
    tenants whose archive is off left out. Runs in a worker thread."""
    table = build_table(batch, events)
    if enabled_for is not None:
        tenants = pc.unique(table["tenant"]).to_pylist()
        off = [t for t in tenants if not enabled_for(t)]
        if off:
            table = table.filter(pc.invert(pc.is_in(table["tenant"], pa.array(off, pa.string()))))
    if not table.num_rows:
        return []
    # Publishes arrive in time order: one tenant without lifecycle rows (a busy small broker)
    # needs no sort; otherwise a stable one by tenant and time.
    if events or pc.count_distinct(table["tenant"]).as_py() > 1:
        order = pc.sort_indices(table, [("tenant", "ascending"), ("ts", "ascending")])
        table = table.take(order)
    hours = pc.divide(table["ts"].cast(pa.int64()), HOUR_MS)
    distinct = pc.unique(hours).to_pylist()
    segments = []
    for hour in distinct:
        part = table.filter(pc.equal(hours, hour)) if len(distinct) > 1 else table
        key = live_segment_key(hour * HOUR_MS, writer_id, next_sequence())
        segments.append(Segment(key, encode_parquet(part, compression=compression), part.num_rows))
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
        batch: list[tuple],
        events: list[dict[str, Any]],
        enabled_for: Callable[[str], bool] | None = None,
    ) -> int:
        """Build and queue the segments of a batch (worker thread); returns rows queued."""
        segments = build_segments(
            batch,
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
