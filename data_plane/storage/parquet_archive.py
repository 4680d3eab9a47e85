"""The archive writer, version 2: batches of routed messages and lifecycle events as Parquet
segments in the object store (schema and layout: `common.archive.schema`).

The event loop only appends: each of a message's fields to its column (`archive_columns`), its
publisher (tenant, client id, device) as an index into the batch's table of publishers, the
payload copied into a buffer reused from batch to batch; nothing decoded or converted. A few
times a second the tap hands the columns to a worker thread (`ParquetArchiveWriter.add`), which
turns them into Arrow arrays (the payload column over the buffer itself), drops the broker's own
messages (and the tenants an `enabled_for` leaves out, where one is given: the broker decides
what to record before it records it, `archive_decision`), and writes them as row groups (in arrival order, all
tenants together: compaction sorts them) of the open segment of each hour; every interval
(`seal`) it closes the segments and queues them. Uploads run in a second worker thread, in order.

Live segments are LZ4 and snappy (`LIVE_COMPRESSION`); compaction writes the history in zstd. The
encoder is warmed up when the tap is built (`ParquetArchiveWriter.warm_up`), so its one-time
imports and kernel set-up happen at start-up, not in the first batch of live traffic.

Small hand-offs keep what the worker reads recently written (in cache, its pages mapped): the
measured cost of the archive was less its own instructions than a second's worth of payloads
streamed through memory beside the event loop's working set.

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

from common.archive.files import ParquetBytesWriter
from common.archive.schema import (
    ARCHIVE_SCHEMA,
    live_segment_key,
    message_id_prefix,
)
from common.stores.object_store import ObjectStore
from data_plane.storage.archive_columns import PublishColumns, publish_columns
from data_plane.storage.archive_rows import _chunks
from data_plane.storage.live_feed import LiveFeed

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
# Live segments: the payloads and correlation data in LZ4 (LZ4_RAW), snappy for the small columns.
# On device telemetry (1 KiB of JSON) LZ4 costs the encoder ~0.9 us per message, snappy ~0.7,
# zstd ~1.2; on the benchmarks' filler, nothing. Uncompressed payloads ("none", for
# bench.archive_encoder) cost more than they save: over sockets, with filler, the archive went
# from 1.11x to 1.53x the CPU per message, writing ~4x the bytes (bench/RESULTS.md).
# Live segments live an hour: compaction rewrites them into the history files with zstd
# throughout (`common.archive.files`), off the broker. Spark, DuckDB and pyarrow read every codec.
LIVE_PAYLOAD_CODECS = ("lz4", "none")


def live_compression(payload_codec: str = "lz4") -> dict[str, str]:
    """Each column's codec in live segments, the payloads' (and correlation data's) given."""
    if payload_codec not in LIVE_PAYLOAD_CODECS:
        raise ValueError(f"live payload codec must be one of {LIVE_PAYLOAD_CODECS}")
    return {
        name: (payload_codec if name in ("payload", "correlation_data") else "snappy")
        for name in ARCHIVE_SCHEMA.names
    }


LIVE_COMPRESSION = live_compression()


@dataclass(slots=True)
class Segment:
    key: str
    body: bytes
    records: int


def default_writer_id() -> str:
    # Host, process and start time: a restarted broker (same pid in a container) never
    # overwrites the segments of its predecessor.
    return f"{os.uname().nodename}-{os.getpid()}-{int(time.time() * 1000):x}"


def write_row_groups(
    columns: PublishColumns,
    events: list[dict[str, Any]],
    files: dict[int, ParquetBytesWriter],
    *,
    enabled_for: Callable[[str], bool] | None = None,
    compression: str | dict[str, str] = LIVE_COMPRESSION,
    segment_key: Callable[[int], str] | None = None,
    feed: LiveFeed | None = None,
) -> int:
    """Write a batch into `files` (hour -> its open segment, added to as needed, its key from
    `segment_key(hour)`): each chunk's rows a row group, in the order they came (publishes in
    time order, the batch's lifecycle rows after them), tenants whose archive is off left out.
    Each part written is offered to the live `feed` with its rows' message ids (the segment's
    key and their positions in it: `common.archive.schema`, "Message ids"). Runs in a worker
    thread; returns rows written.

    Not sorted by tenant: in a batch of several tenants, the sort and the `take` behind it (a
    second copy of every payload) cost 0.25 us per row, more than the rest of the encoding.
    Nothing reads a live segment by its order: compaction sorts each segment by tenant and time
    (`common.archive.files`), readers sort by time."""
    off: list[str] = []
    if enabled_for is not None:
        tenants = columns.tenants.union(e["tenant"] for e in events)
        off = [t for t in tenants if not enabled_for(t)]
    excluded = pa.array(off, pa.string())
    written = 0
    for table in _chunks(columns, events):
        if off:
            table = table.filter(pc.invert(pc.is_in(table["tenant"], excluded)))
        if not table.num_rows:
            continue
        hours = pc.divide(table["ts"].cast(pa.int64()), HOUR_MS)
        distinct = pc.unique(hours).to_pylist()
        for hour in distinct:
            part = table.filter(pc.equal(hours, hour)) if len(distinct) > 1 else table
            file = files.get(hour)
            if file is None:
                key = segment_key(hour) if segment_key is not None else None
                file = files[hour] = ParquetBytesWriter(compression=compression, key=key)
            first_row = file.rows
            file.write(part)
            if feed is not None and file.key is not None:
                feed.offer(part, message_id_prefix(file.key), first_row)
        written += table.num_rows
    return written


class ParquetArchiveWriter:
    """Encoded segments waiting for the object store, bounded; uploads in order."""

    dataset = "archive"

    def __init__(
        self,
        store: ObjectStore,
        *,
        writer_id: str | None = None,
        max_pending_bytes: int = 64 * 1024 * 1024,
        compression: str | dict[str, str] = LIVE_COMPRESSION,
        feed: LiveFeed | None = None,
    ) -> None:
        self.store = store
        self.feed = feed  # the rows the rules read, handed to the live rules job as written
        self.writer_id = writer_id or default_writer_id()
        self.max_pending_bytes = max_pending_bytes
        self.compression = compression
        self._pending: list[Segment] = []
        self._pending_bytes = 0
        self._uploading: Segment | None = None  # never dropped: it may be landing right now
        self._sequence = 0
        self._open: dict[int, ParquetBytesWriter] = {}  # hour -> its segment so far (worker's)
        self._lock = threading.Lock()  # the builder thread adds while the uploader takes
        self.written_records = 0
        self.dropped_records = 0
        self.upload_failures = 0

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @staticmethod
    def warm_up() -> None:
        """Encode a throwaway batch (a publish and a lifecycle row, two tenants, one left out)
        so that what the encoder loads on first use is loaded now, at start-up: pyarrow imports
        pandas the first time it converts Python objects (about 0.2 s of CPU and 30,000 objects
        the collector would rescan, had they arrived after the broker's `gc.freeze()`), and
        Parquet's and Arrow's kernels initialise on their first call. Measured, that first batch
        was a third of a microsecond per message of a 5-second run at 100,000 msg/s."""
        from types import SimpleNamespace

        message = SimpleNamespace(
            topic="warm/up",
            payload=b"x",
            qos=1,
            retain=False,
            properties={"content_type": "x"},
            publisher="c",
            tenant="t",
            device="d",
            origin=None,
        )
        columns = publish_columns([(time.time(), message), (time.time(), message)])
        event = {"event": "client.connected", "tenant": "u", "ts": 0, "client_id": "c"}
        files: dict[int, ParquetBytesWriter] = {}
        try:
            write_row_groups(columns, [event], files, enabled_for=lambda tenant: tenant == "t")
        finally:
            columns.release()
        for file in files.values():
            file.close()

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def add(
        self,
        columns: PublishColumns,
        events: list[dict[str, Any]],
        enabled_for: Callable[[str], bool] | None = None,
    ) -> int:
        """Write a batch as row groups of the open segments (worker thread; `seal` closes
        them), then let go of its payload buffer; returns rows written."""
        try:
            return write_row_groups(
                columns,
                events,
                self._open,
                enabled_for=enabled_for,
                compression=self.compression,
                segment_key=self._segment_key,
                feed=self.feed,
            )
        finally:
            columns.release()  # the tap may reuse the payload buffer once no array points in

    def _segment_key(self, hour: int) -> str:
        """A segment's key, decided when it is opened: its rows' message ids are known as they
        are written (the live feed carries them)."""
        return live_segment_key(hour * HOUR_MS, self.writer_id, self._next_sequence())

    def seal(self) -> int:
        """Close the open segments and queue them for upload (worker thread); returns rows."""
        segments = []
        for hour in sorted(self._open):
            file = self._open[hour]
            key = file.key or self._segment_key(hour)
            segments.append(Segment(key, file.close(), file.rows))
        self._open = {}
        with self._lock:
            for segment in segments:
                self._pending.append(segment)
                self._pending_bytes += len(segment.body)
            self._drop_over_bound()
        return sum(s.records for s in segments)

    def encode(
        self,
        columns: PublishColumns,
        events: list[dict[str, Any]],
        enabled_for: Callable[[str], bool] | None = None,
    ) -> int:
        """A batch as segments of its own (`add` then `seal`); returns rows queued."""
        self.add(columns, events, enabled_for)
        return self.seal()

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
