"""The live feed: the archived rows a tenant's enabled rules read, handed to the live rules job
through a Redis stream as they are archived, with no file in between (issue 43; the job's side
is `spark.rules.feed`).

Where it sits: the archive's builder thread writes each hand-off of the tap (every `TICK` while
a tenant with rules has rows waiting) as row groups of the open live segments; right after, it
gives each written part to `LiveFeed.offer` with the segment's id prefix and the part's first
row, so every row in the feed carries the same `message_id` as its row in the archive (what the
action ledger keys actions by). `offer` keeps the rows some tenant's rules read (`RuleTopics`:
the rules' topic filters and lifecycle events, one dict lookup per topic seen before) and queues
them; the feed's own thread sends each as one stream entry (Arrow IPC, LZ4) with `XADD … MAXLEN
~`. Nothing of this runs on the event loop, and nothing waits for Redis there.

Marks (`live_feed_format`): after each hand-off's parts the tap gives `mark` the time by which
everything this broker received was handed over (queued behind those parts on the same builder
thread, sent in order on the feed's): the job's alarms fire a timer once every writer's mark is
past it, not a guessed lag later.

Bounded, and counted when it drops: the queue holds at most `max_queued_bytes` (beyond, the
newest part is dropped); the stream keeps about the last `keep_seconds` (Redis trims older
entries as new ones come, so a job down or behind for longer finds a gap, which it counts and
names); a Redis error drops the entry. Each drop is logged with its time window, counted (`dropped_rows`, the broker's
`/metrics`) and left in the archive, from which `manage.py run_rules --from/--to` runs it again.
A tenant without rules pays nothing for them: its rows never reach `offer`'s per-row work.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.archive.live_feed_format import (
    BYE_FIELD,
    COUNT_FIELD,
    DEFAULT_KEY,
    MARK_FIELD,
    ROWS_FIELD,
    WRITER_FIELD,
    encode_entry,
)
from common.archive.schema import EVENT_PUBLISH, HISTORY_SCHEMA, MESSAGE_ID
from common.mqtt.topics import topic_matches

log = logging.getLogger(__name__)

DEFAULT_KEEP_SECONDS = 300.0  # what the stream keeps: a job's restart, with room to spare
DEFAULT_MAX_QUEUED_BYTES = 32 << 20


class RuleTopics:
    """One tenant's enabled rules' FROM: topic filters and lifecycle events; a topic's first
    lookup decides it (kept, bounded). Read and filled by the builder thread only."""

    __slots__ = ("filters", "events", "_seen")

    MAX_TOPICS = 4096

    def __init__(self, filters: Iterable[str], events: Iterable[str]) -> None:
        self.filters = tuple(filters)
        self.events = frozenset(events)
        self._seen: dict[str, bool] = {}

    def reads(self, event: str, topic: str | None) -> bool:
        if event != EVENT_PUBLISH:
            return event in self.events
        if topic is None:
            return False
        wanted = self._seen.get(topic)
        if wanted is None:
            wanted = any(topic_matches(f, topic) for f in self.filters)
            if len(self._seen) >= self.MAX_TOPICS:
                self._seen.clear()
            self._seen[topic] = wanted
        return wanted


def _reads(tenants: dict[str, RuleTopics], key: str) -> bool:
    """Whether the rules of the row's tenant read it; `key`: tenant, event, topic joined by NUL
    (a NUL topic: none)."""
    tenant, event, topic = key.split("\x00", 2)
    topics = tenants.get(tenant)
    return topics is not None and topics.reads(event, None if topic == "\x00" else topic)


class LiveFeed:
    """The broker's end of the live feed (see the module's docstring)."""

    def __init__(
        self,
        redis_url: str,
        *,
        key: str = DEFAULT_KEY,
        keep_seconds: float = DEFAULT_KEEP_SECONDS,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        client: Any = None,
    ) -> None:
        if client is None:
            import redis

            client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self.client = client
        self.key = key
        self.keep_ms = int(keep_seconds * 1000)
        self.max_queued_bytes = max_queued_bytes
        # Tenant -> its rules' FROM; replaced whole per tenant by the archive decisions (on the
        # loop: a dict item set is atomic), read by the builder thread.
        self.tenants: dict[str, RuleTopics] = {}
        # This process among the stream's writers (its marks speak for it alone).
        self.writer = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}".encode()
        self.sent_rows = 0
        self.sent_entries = 0
        self.dropped_rows = 0
        # An entry's fields, its rows, their oldest and newest time (ms; a mark: 0 rows)
        self._queue: deque[tuple[dict[bytes, Any], int, int, int]] = deque()
        self._queued_bytes = 0
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="rules-feed", daemon=True)
        self._thread.start()

    # -- the archive decisions' side (event loop) ----------------------------------------------

    def set_rules(self, tenant: str, filters: Iterable[str], events: Iterable[str]) -> None:
        filters, events = tuple(filters), frozenset(events)
        if filters or events:
            self.tenants[tenant] = RuleTopics(filters, events)
        else:
            self.tenants.pop(tenant, None)

    # -- the builder thread's side -------------------------------------------------------------

    def offer(self, part: pa.Table, prefix: str, first_row: int) -> int:
        """`part` was just written as rows `first_row…` of the segment whose ids start with
        `prefix`: queue the rows some tenant's rules read; returns how many."""
        tenants = dict(self.tenants)  # a snapshot: the loop may change it meanwhile
        if not tenants or not part.num_rows:
            return 0
        if not pc.any(pc.is_in(part["tenant"], pa.array(list(tenants), pa.string()))).as_py():
            return 0
        # Decided once per distinct (tenant, event, topic) of the part, not per row (a part is
        # many messages on few topics): Arrow builds the keys, Python only looks at each once.
        # NUL joins them (no slug, event or topic holds one) and stands for a missing topic.
        keys = pc.dictionary_encode(
            pc.binary_join_element_wise(
                part["tenant"], part["event"], pc.fill_null(part["topic"], "\x00"), "\x00"
            )
        ).combine_chunks()
        decided = [_reads(tenants, key) for key in keys.dictionary.to_pylist()]
        if not any(decided):
            return 0
        keep = pc.take(pa.array(decided, pa.bool_()), keys.indices)
        kept = pc.indices_nonzero(keep)
        count = len(kept)
        chosen = part if count == part.num_rows else part.filter(keep)  # no copy when all are
        ids = pc.binary_join_element_wise(
            f"{prefix}:", pc.cast(pc.add(kept, first_row), pa.string()), ""
        )
        table = chosen.append_column(HISTORY_SCHEMA.field(MESSAGE_ID), ids)
        span = pc.min_max(chosen["ts"].cast(pa.int64())).as_py()
        body = encode_entry(table)
        fields = {ROWS_FIELD: body, COUNT_FIELD: count, WRITER_FIELD: self.writer}
        self._enqueue(fields, len(body), count, span["min"], span["max"])
        return count

    def mark(self, at: float, last: bool = False) -> None:
        """Everything this broker received up to `at` (time.time()) was offered before this
        call: say so in the stream, after those rows (`last`: and it stops writing)."""
        fields = {WRITER_FIELD: self.writer, MARK_FIELD: int(at * 1000)}
        if last:
            fields[BYE_FIELD] = 1
        self._enqueue(fields, 0, 0, 0, 0)

    def _enqueue(
        self, fields: dict[bytes, Any], size: int, rows: int, oldest: int, newest: int
    ) -> None:
        with self._wake:
            if self._queued_bytes + size > self.max_queued_bytes:
                if rows:
                    self._drop(rows, oldest, newest, "the feed's queue is full (Redis is slow)")
                return
            self._queue.append((fields, rows, oldest, newest))
            self._queued_bytes += size
            self._wake.notify()

    def _drop(self, rows: int, oldest: int, newest: int, why: str) -> None:
        self.dropped_rows += rows
        log.error(
            "live feed: %d row(s) for the rules dropped (%s); they are in the archive: run "
            "them with manage.py run_rules --from %s --to %s",
            rows,
            why,
            _iso(oldest),
            _iso(newest + 1),
        )

    # -- the feed's thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if not self._queue:
                    return
                fields, rows, oldest, newest = self._queue.popleft()
                self._queued_bytes -= len(fields.get(ROWS_FIELD, b""))
            try:
                # Entries older than `keep_seconds` go (in whole nodes: `~`): bounded by time,
                # whatever the number of brokers adding to the stream.
                oldest_kept = int(time.time() * 1000) - self.keep_ms
                self.client.xadd(
                    self.key, fields, minid=f"{max(oldest_kept, 0)}-0", approximate=True
                )
            except Exception as exc:
                if rows:  # a mark lost: the next one says as much
                    self._drop(rows, oldest, newest, f"Redis: {exc}")
                continue
            if rows:
                self.sent_rows += rows
                self.sent_entries += 1

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued and a last mark (up to `timeout` seconds), then stop."""
        self.mark(time.time(), last=True)
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
