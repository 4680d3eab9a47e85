"""The usage log writer: metered tenant-minutes as Parquet segments in the object store.

The usage log (`common.archive.schema.USAGE_SCHEMA`) is the single source of the bill. The meter
hands this writer its finished minutes about every ten seconds (`append`, cheap, on the event
loop); `flush` turns what is buffered into one Parquet file per hour the rows fall in, rows sorted
by (tenant, minute), and puts it in the object store from a thread, never blocking the loop.

Nothing metered is dropped while the store is away: rows stay buffered and are retried on the next
flush, up to `max_rows`; past that the oldest are given up and counted in `rows_lost` (a broker
cut off from its object store for days must not run out of memory).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import secrets
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from common.archive.schema import USAGE_SCHEMA, usage_segment_key
from common.stores.object_store import ObjectStore

log = logging.getLogger(__name__)


def usage_row(tenant: str, minute: int, usage: Any, writer: str) -> dict[str, Any]:
    """One `MinuteUsage` of the meter as a usage-log row."""
    return {
        "tenant": tenant,
        "minute": datetime.fromtimestamp(minute, UTC),
        "writer": writer,
        "messages": usage.message_units,
        "connection_minutes": usage.connection_minutes,
        "rules_triggered": 0,
        "actions_executed": 0,
        "storage_byte_hours": usage.storage_byte_hours,
        "publishes_in": usage.messages_in,
        "deliveries_out": usage.messages_out,
        "bytes_in": usage.bytes_in,
        "bytes_out": usage.bytes_out,
        "dropped": sum(usage.dropped.values()),
        "shadow_operations": usage.shadow_operations,
    }


def encode_segment(rows: list[dict[str, Any]]) -> bytes:
    """Rows as one Parquet file, sorted by (tenant, minute) so readers prune by statistics."""
    rows = sorted(rows, key=lambda r: (r["tenant"], r["minute"]))
    table = pa.Table.from_pylist(rows, schema=USAGE_SCHEMA)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


class UsageLogWriter:
    def __init__(
        self,
        store: ObjectStore,
        *,
        writer_id: str | None = None,
        max_rows: int = 500_000,
        max_age: float = 300.0,
    ) -> None:
        self.store = store
        # Segments are written at most every `max_age` seconds (fewer, larger files for Spark).
        self.max_age = max_age
        self._last_write = time.monotonic()
        # Unique per process start, so a restarted broker never overwrites its earlier segments.
        self.writer_id = writer_id or f"{os.uname().nodename}-{os.getpid()}-{secrets.token_hex(3)}"
        self.max_rows = max_rows
        self._rows: list[dict[str, Any]] = []
        self._sequence = 0
        self._lock = threading.Lock()
        self.rows_written = 0
        self.rows_lost = 0
        self.segments_written = 0

    def append_minutes(self, minutes: list[tuple[str, int, Any]]) -> None:
        self.append([usage_row(t, m, u, self.writer_id) for t, m, u in minutes])

    def append(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._rows.extend(rows)
            excess = len(self._rows) - self.max_rows
            if excess > 0:
                del self._rows[:excess]
                self.rows_lost += excess
                log.error("usage log buffer full: %d oldest rows given up", excess)

    def pending(self) -> int:
        return len(self._rows)

    def write_pending(self) -> int:
        """Write everything buffered (blocking: call it from a thread). Returns rows written."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return 0
        by_hour: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_hour[int(row["minute"].timestamp()) // 3600].append(row)
        written = 0
        try:
            for hour in sorted(by_hour):
                part = by_hour[hour]
                self._sequence += 1
                key = usage_segment_key(hour * 3600 * 1000, self.writer_id, self._sequence)
                self.store.put(key, encode_segment(part))
                written += len(part)
                self.segments_written += 1
        except Exception:
            unwritten = [r for h in sorted(by_hour) for r in by_hour[h]][written:]
            with self._lock:
                self._rows[:0] = unwritten
            raise
        finally:
            self.rows_written += written
        return written

    async def flush(self, force: bool = False) -> int:
        if not force and time.monotonic() - self._last_write < self.max_age:
            return 0
        self._last_write = time.monotonic()
        return await asyncio.to_thread(self.write_pending)
