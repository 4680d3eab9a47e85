"""Writes version 1 archive segments (gzip'd NDJSON, the format before Parquet), so the tests
can prove that yesterday's history stays readable (`common.archive.schema.read_ndjson_segment`).
Production no longer writes this format.

Key:  {dataset}/tenant={slug}/date={YYYY-MM-DD}/hour={HH}/{writer}-{sequence:08d}.ndjson.gz

A segment closes after `max_age` seconds or `max_bytes` of uncompressed lines, whichever comes
first. When the store is unavailable, closed segments wait in memory up to `max_pending_bytes`;
beyond that the oldest are dropped and counted (`dropped_records`).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from common.stores.object_store import ObjectStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Segment:
    key_prefix: str
    opened: float
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    records: int = 0


@dataclass(slots=True)
class _Closed:
    key: str
    body: bytes
    records: int


class NdjsonSegmentWriter:
    def __init__(
        self,
        store: ObjectStore,
        *,
        dataset: str = "usage",
        writer_id: str | None = None,
        max_age: float = 60.0,
        max_bytes: int = 8 * 1024 * 1024,
        max_pending_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.dataset = dataset
        self.writer_id = writer_id or f"{os.uname().nodename}-{os.getpid()}"
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.max_pending_bytes = max_pending_bytes
        self._open: dict[tuple[str, str], _Segment] = {}
        self._pending: list[_Closed] = []
        self._pending_bytes = 0
        self._sequence = 0
        self._lock = threading.Lock()  # uploads may run in a thread while the loop appends
        self.written_records = 0
        self.dropped_records = 0
        self.upload_failures = 0

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def append(self, record: dict[str, Any]) -> None:
        hour = datetime.fromtimestamp(record["ts"] / 1000, UTC).strftime("%Y-%m-%d/hour=%H")
        partition = (record["tenant"], hour)
        segment = self._open.get(partition)
        if segment is None:
            prefix = f"{self.dataset}/tenant={record['tenant']}/date={hour}"
            segment = self._open[partition] = _Segment(prefix, time.monotonic())
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        segment.lines.append(line)
        segment.size += len(line)
        segment.records += 1
        if segment.size >= self.max_bytes:
            self._close(partition)

    def flush(self, *, force: bool = False) -> int:
        """Close due segments and upload what is pending; returns records uploaded. Blocking."""
        self.close_due(force=force)
        return self.upload_pending()

    def close_due(self, *, force: bool = False) -> None:
        """On the thread that appends: close segments past their age (all with `force`)."""
        now = time.monotonic()
        for partition, segment in list(self._open.items()):
            if force or now - segment.opened >= self.max_age:
                self._close(partition)

    def upload_pending(self) -> int:
        """Upload closed segments in order (safe to run in a worker thread)."""
        uploaded = 0
        while True:
            with self._lock:
                if not self._pending:
                    break
                closed = self._pending[0]
            try:
                self.store.put(closed.key, closed.body)
            except Exception as exc:
                self.upload_failures += 1
                log.warning(
                    "object store upload of %s failed (%s); %d bytes pending",
                    closed.key,
                    exc,
                    self._pending_bytes,
                )
                break
            self._pending.pop(0)
            self._pending_bytes -= len(closed.body)
            uploaded += closed.records
            self.written_records += closed.records
        return uploaded

    def _close(self, partition: tuple[str, str]) -> None:
        segment = self._open.pop(partition)
        self._sequence += 1
        key = f"{segment.key_prefix}/{self.writer_id}-{self._sequence:08d}.ndjson.gz"
        body = gzip.compress(b"".join(segment.lines), compresslevel=5)
        with self._lock:
            self._pending.append(_Closed(key, body, segment.records))
            self._pending_bytes += len(body)
            self._drop_over_bound()

    def _drop_over_bound(self) -> None:
        while self._pending_bytes > self.max_pending_bytes and len(self._pending) > 1:
            dropped = self._pending.pop(0)
            self._pending_bytes -= len(dropped.body)
            self.dropped_records += dropped.records
            log.error(
                "archive buffer full: dropped segment %s (%d records)", dropped.key, dropped.records
            )


# The name the usage wiring (and billing's code) knows it by.
ArchiveWriter = NdjsonSegmentWriter


def read_segment(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(body).splitlines() if line]
