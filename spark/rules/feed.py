"""The live rules job's end of the live feed: the Redis stream the brokers write the rows the
rules read to, as they archive them (`data_plane.storage.live_feed`), each row with its archive
message id.

- `FeedReader` reads entries after a stream id (`XREAD BLOCK`), as one Arrow table per read,
  and keeps the writers' marks (`Watermarks`): `settled()` is the time before which no row is
  still on its way (the alarms' clock).
- `FeedProgress` knows, per micro-batch, how many of its actions are still in memory (queued or
  running in the lanes); `acted()` is the newest stream id up to which every batch's actions are
  done or kept in the durable retry queue.
- `Positions` keeps (`acted`, `evaluated`) in Postgres (`tenants_rulefeedposition`), written
  with the rule counters and after the action ledger (`LiveJob._flush_books`), so a restart reads
  again from `acted` and, up to `evaluated`, only runs the actions the ledger does not hold:
  nothing acknowledged and matched is lost, nothing counted twice.

Stream ids are `{milliseconds}-{sequence}` (Redis): they order entries and say when each was
added, so a gap (entries Redis trimmed before the job read them) has a time window the log names
for `manage.py run_rules --from/--to`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pyarrow as pa

from common.archive.live_feed_format import (
    BYE_FIELD,
    DEFAULT_KEY,
    MARK_FIELD,
    ROWS_FIELD,
    WRITER_FIELD,
    decode_entry,
)
from common.archive.schema import HISTORY_SCHEMA
from common.contracts import tables

log = logging.getLogger("spark.rules.feed")

START = "0-0"
# Spark takes timestamps in microseconds: the feed's rows as the job hands them to Spark.
SPARK_SCHEMA = HISTORY_SCHEMA.set(
    HISTORY_SCHEMA.get_field_index("ts"), pa.field("ts", pa.timestamp("us", tz="UTC"), False)
)


def stream_id(text: str | bytes) -> tuple[int, int]:
    if isinstance(text, bytes):
        text = text.decode()
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def id_time(text: str) -> datetime:
    return datetime.fromtimestamp(stream_id(text)[0] / 1000, UTC)


def id_at(ms: int) -> str:
    """The stream id just before anything added at `ms` (epoch milliseconds)."""
    return f"{max(0, ms - 1)}-{2**63 - 1}" if ms > 0 else START


class Watermarks:
    """The stream's writers (broker processes) and each one's last mark: the time by which all
    it received is in the stream before the mark (`common.archive.live_feed_format`). The lowest
    over the writers is the time before which no row is still on its way — while each is heard
    from. A writer unheard for `STALE` seconds is gone or stalled (its rows, if any come, are
    late); rows from a writer that sends no marks (an older broker, in a rolling upgrade) leave
    the fence unknown for `UNMARKED_FOR` seconds after the last of them."""

    STALE = 2.0
    UNMARKED_FOR = 30.0

    def __init__(self) -> None:
        self.writers: dict[bytes, tuple[float | None, float]] = {}  # -> (mark s, heard monotonic)
        self._unmarked = -float("inf")  # when rows without a writer were last read (monotonic)

    def saw(self, fields: dict[bytes, Any]) -> None:
        now = time.monotonic()
        writer = fields.get(WRITER_FIELD)
        if writer is None:
            self._unmarked = now
            return
        if BYE_FIELD in fields:
            self.writers.pop(writer, None)
            return
        mark = fields.get(MARK_FIELD)
        previous = self.writers.get(writer, (None, now))[0]
        self.writers[writer] = (int(mark) / 1000 if mark is not None else previous, now)

    def fence(self) -> float | None:
        """The lowest live writer's mark, or None when it is not known."""
        now = time.monotonic()
        for writer in [w for w, (_, heard) in self.writers.items() if now - heard > self.STALE]:
            del self.writers[writer]
        if not self.writers or now - self._unmarked < self.UNMARKED_FOR:
            return None
        marks = [mark for mark, _ in self.writers.values()]
        return None if None in marks else min(m for m in marks if m is not None)


class FeedReader:
    def __init__(self, redis_url: str, key: str = DEFAULT_KEY, client: Any = None) -> None:
        if client is None:
            import redis

            client = redis.Redis.from_url(redis_url, socket_timeout=10, socket_connect_timeout=5)
        self.client = client
        self.key = key
        self.marks = Watermarks()

    def read(self, after: str, *, block_ms: int = 200, count: int = 64) -> tuple[str, pa.Table]:
        """Entries after `after`: (the last one's id, their rows as one table — none when they
        were marks only); (`after`, an empty table) when none came within `block_ms`."""
        reply = self.client.xread({self.key: after}, count=count, block=block_ms)
        if not reply:
            return after, SPARK_SCHEMA.empty_table()
        _, entries = reply[0]
        parts = []
        for _, fields in entries:
            self.marks.saw(fields)
            if ROWS_FIELD in fields:
                parts.append(decode_entry(fields[ROWS_FIELD]))
        last = entries[-1][0].decode()
        return last, spark_table(parts)

    def settled(self, last: str | None, lag: float) -> float:
        """The time before which every row is read, as far as this reader knows: the writers'
        lowest mark; without one, `lag` before the last entry read (or before now, when `last`
        is None: nothing new came)."""
        fence = self.marks.fence()
        if fence is not None:
            return fence
        if last is None:
            return time.time() - lag
        return id_time(last).timestamp() - lag

    def trimmed_after(self, after: str) -> str | None:
        """The newest entry Redis trimmed, when it is newer than `after` (entries the job never
        read are gone: a gap up to it); None otherwise, or when the stream does not exist."""
        try:
            info = self.client.xinfo_stream(self.key)
        except Exception as exc:  # no such key: nothing written yet (or Redis restarted)
            if "no such key" in str(exc).lower():
                return None
            raise
        deleted = info.get("max-deleted-entry-id")
        if isinstance(deleted, bytes):
            deleted = deleted.decode()
        if deleted and stream_id(deleted) > stream_id(after):
            return str(deleted)
        return None


def spark_table(parts: Iterable[pa.Table]) -> pa.Table:
    parts = [p.cast(SPARK_SCHEMA) for p in parts if p.num_rows]
    if not parts:
        return SPARK_SCHEMA.empty_table()
    return pa.concat_tables(parts)


class FeedProgress:
    """Micro-batches read from the feed whose actions may still be in memory (thread-safe: the
    lanes settle from their thread, the feed loop opens and closes, the recorder asks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # batch -> [its last stream id, actions not settled, all of its actions handed over]
        self._batches: OrderedDict[int, list[Any]] = OrderedDict()
        self._acted: str | None = None

    def open(self, batch: int, last_id: str) -> None:
        with self._lock:
            self._batches[batch] = [last_id, 0, False]

    def add(self, batch: int, jobs: int) -> None:
        with self._lock:
            self._batches[batch][1] += jobs

    def close(self, batch: int) -> None:
        with self._lock:
            self._batches[batch][2] = True

    def settle(self, batch: int, count: int = 1) -> None:
        with self._lock:
            entry = self._batches.get(batch)
            if entry is not None:
                entry[1] -= count

    def acted(self) -> str | None:
        """The newest stream id every batch up to which is done (None: none yet)."""
        with self._lock:
            while self._batches:
                batch, (last_id, waiting, closed) = next(iter(self._batches.items()))
                if not closed or waiting > 0:
                    break
                self._acted = last_id
                del self._batches[batch]
            return self._acted

    def waiting(self) -> int:
        with self._lock:
            return sum(entry[1] for entry in self._batches.values())


_LOAD = f"SELECT acted, evaluated FROM {tables.RULE_FEED_POSITION} WHERE stream = %s"
_SAVE = f"""
INSERT INTO {tables.RULE_FEED_POSITION} (stream, acted, evaluated, updated_at)
VALUES (%s, %s, %s, now())
ON CONFLICT (stream) DO UPDATE SET acted = EXCLUDED.acted, evaluated = EXCLUDED.evaluated,
    updated_at = EXCLUDED.updated_at
"""


class Positions:
    """Where the job is in a stream: (`acted`, `evaluated`), in Postgres."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.saved: tuple[str, str] | None = None

    def load(self, conn: psycopg.Connection) -> tuple[str, str] | None:
        row = conn.execute(_LOAD, (self.key,)).fetchone()
        self.saved = (row[0], row[1]) if row else None
        return self.saved

    def save(self, conn: psycopg.Connection, acted: str, evaluated: str) -> None:
        if self.saved == (acted, evaluated):
            return
        conn.execute(_SAVE, (self.key, acted, evaluated))
        self.saved = (acted, evaluated)
