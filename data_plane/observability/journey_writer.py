"""The journey's writer: every `interval` seconds the rows the recorder gathered on the event loop
become one Parquet segment per stream (`common.journey.schema`), built and uploaded on a worker
thread; the loop only swaps the recorder's columns.

A store that is down keeps the segments in memory up to `MAX_PENDING_BYTES`, then drops the
oldest (counted in `mqtt_journey_segments_dropped_total`, logged): the journey is an aid to the
tenant, never a reason for the broker to stop or to run out of memory.

It also keeps the outcome counters of `/metrics` (`mqtt_journey_outcomes_total{tenant, outcome,
cause}`), counted here on the worker thread from the rows themselves: the hot path counts
nothing. Labels are bounded: tenants the broker authenticated, the outcome names, and a cause
from a fixed set (quota keys, drop causes), anything else being `other`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import Counter, deque
from collections.abc import Callable, Container, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from common.contracts.quota_keys import QUOTA_KEYS
from common.journey.files import encode_segment, rows_table
from common.journey.schema import (
    CLIENT_SCHEMA,
    CLIENTS,
    DELIVERED,
    MESSAGE_SCHEMA,
    MESSAGES,
    NO_SUBSCRIBERS,
    live_segment_key,
)
from common.runtime.cancellation import cancel_and_wait
from data_plane.observability.journey import JourneyRecorder, PublishColumns

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 64 * 1024 * 1024
# Causes that may name a metric series; the rest count as `other`.
KNOWN_CAUSES = frozenset(QUOTA_KEYS) | {
    "message_size",
    "retained",
    "subscriptions",
    "connections",
    "persistent_sessions",
    "shadows",
    "certificates",
    "shared_groups",
    "group_messages",
    "group_bytes",
}


def default_writer_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _numbers(column: Any, type_: pa.DataType, n: int) -> pa.Array:
    """A numeric column (a `Buffer` or an `array`) as an Arrow array over its memory."""
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(column)])


def _topics(columns: PublishColumns, n: int) -> pa.Array:
    if columns.topic_size is None:  # the Python recorder's `str`s
        return pa.array(columns.topic, pa.string())
    ends = pc.cumulative_sum(_numbers(columns.topic_size, pa.uint32(), n).cast(pa.int64()))
    offsets = pa.concat_arrays([pa.array([0], pa.int64()), ends]).cast(pa.int32())
    data = pa.py_buffer(columns.topic)  # no copy: a batch's buffers are never reused
    return pa.Array.from_buffers(pa.string(), n, [None, offsets.buffers()[1], data])


def publish_table(columns: PublishColumns, node: str) -> pa.Table:
    """The routed publishes of a batch as message rows. Tenant, client id and outcome are
    dictionary columns built from the batch's small tables without touching a row (a reader sees
    strings). Only the columns a routed publish has are written, each required but the packet id
    (no definition levels to encode: a third of Parquet's work here); readers add the rest as
    nulls (`common.journey.files.conform`, the reader's `union_by_name`). Building and encoding
    cost the worker about 0.09 us a row."""
    n = len(columns)
    index = _numbers(columns.publisher, pa.uint32(), n).cast(pa.int32())
    tenants = pa.array([p[0] for p in columns.publishers], pa.string())
    clients = pa.array([p[1] for p in columns.publishers], pa.string())
    sessions = _numbers(columns.sessions, pa.uint32(), n).cast(pa.int32())
    reached = pc.greater(sessions, 0).cast(pa.int8())
    packet_ids = _numbers(columns.packet_id, pa.uint32(), n).cast(pa.int32())
    ms = pc.multiply(_numbers(columns.ts, pa.float64(), n), 1000)
    ts = pc.cast(ms, pa.int64(), safe=False).cast(pa.timestamp("ms", tz="UTC"))
    queued = _numbers(columns.queued, pa.uint32(), n).cast(pa.int32())
    table = pa.Table.from_arrays(
        [
            pa.DictionaryArray.from_arrays(index, tenants),
            ts,
            pa.DictionaryArray.from_arrays(index, clients),
            _topics(columns, n),
            _numbers(columns.qos, pa.uint8(), n).cast(pa.int8()),
            _numbers(columns.size, pa.uint32(), n).cast(pa.int32()),
            pc.if_else(pc.equal(packet_ids, 0), None, packet_ids),
            pa.DictionaryArray.from_arrays(reached, _REACHED),
            sessions,
            queued,
            pa.DictionaryArray.from_arrays(
                pa.repeat(pa.scalar(0, pa.int8()), n), pa.array([node], pa.string())
            ),
        ],
        schema=_ROUTED_SCHEMA,
    )
    return _with_losses(table, columns) if columns.linked else table


def _with_losses(table: pa.Table, columns: PublishColumns) -> pa.Table:
    """The rows whose message a subscriber dropped as it arrived (`PublishColumns.linked`,
    rare): their id (the drop rows carry it too), how many dropped it and why, and `queued`
    without the offline sessions that did not keep it after all."""
    n = table.num_rows
    ids: list[str | None] = [None] * n
    lost: list[int | None] = [None] * n
    reasons: list[str | None] = [None] * n
    queued = table["queued"].to_pylist()
    for row, loss in columns.linked.items():
        ids[row], lost[row], reasons[row] = loss.message_id, loss.lost, loss.reason()
        queued[row] = max(0, queued[row] - loss.offline)
    table = table.set_column(
        table.schema.get_field_index("queued"),
        table.schema.field("queued"),
        pa.array(queued, pa.int32()),
    )
    table = table.append_column(pa.field("reason", pa.string()), pa.array(reasons, pa.string()))
    table = table.append_column(pa.field("message_id", pa.string()), pa.array(ids, pa.string()))
    return table.append_column(pa.field("lost", pa.int32()), pa.array(lost, pa.int32()))


_DICTIONARY = pa.dictionary(pa.int32(), pa.string())
_ROUTED_SCHEMA = pa.schema(
    [
        pa.field("tenant", _DICTIONARY, nullable=False),
        pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("client_id", _DICTIONARY, nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("qos", pa.int8(), nullable=False),
        pa.field("size", pa.int32(), nullable=False),
        pa.field("packet_id", pa.int32()),  # null at QoS 0
        pa.field("outcome", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("sessions", pa.int32(), nullable=False),
        pa.field("queued", pa.int32(), nullable=False),
        pa.field("node", pa.dictionary(pa.int8(), pa.string()), nullable=False),
    ]
)


_REACHED = pa.array([NO_SUBSCRIBERS, DELIVERED], pa.string())  # by sessions > 0


class JourneyWriter:
    """Takes the recorder's rows every `interval` seconds and writes them (see module doc)."""

    def __init__(
        self,
        recorder: JourneyRecorder,
        store: Any,
        *,
        writer_id: str | None = None,
        interval: float = 2.0,
    ) -> None:
        self.recorder = recorder
        self.store = store
        self.writer_id = writer_id or default_writer_id()
        self.interval = interval
        self._sequence = 0
        self._pending: deque[tuple[str, bytes]] = deque()
        self._pending_bytes = 0
        self.dropped_segments = 0
        self.outcomes: Counter[tuple[str, str, str]] = Counter()
        self.tenants: Callable[[], Container[str]] | None = None  # known tenants: the label bound
        self._task: asyncio.Task | None = None
        self._busy: asyncio.Future | None = None
        self._thread = ThreadPoolExecutor(1, "journey")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="journey")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self._busy is not None and not self._busy.done():
                continue  # the last round is still writing: its rows wait for the next
            try:
                self._busy = self._hand_off()
            except Exception:
                log.exception("journey batch failed")

    def _hand_off(self) -> asyncio.Future:
        rows = self.recorder.take()
        future = asyncio.get_running_loop().run_in_executor(self._thread, self.write, *rows)
        future.add_done_callback(_log_failure)
        return future

    async def flush(self) -> None:
        """Write what was gathered, now (tests, shutdown)."""
        if self._busy is not None:
            await asyncio.wait([self._busy])
        self._busy = self._hand_off()
        await asyncio.wait([self._busy])

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        try:
            await self.flush()
        finally:
            self._thread.shutdown(wait=False)

    # -- on the worker thread ---------------------------------------------------------------

    def write(
        self,
        columns: PublishColumns,
        others: list[dict[str, object]],
        events: list[dict[str, object]],
    ) -> None:
        if len(columns):
            routed = publish_table(columns, self.recorder.node)
            self._count_routed(routed)
            self._queue(MESSAGES, routed)
        if others:  # rare rows: a segment of their own, in the schema's plain types
            table = rows_table(others, MESSAGE_SCHEMA, "journey")
            if table.num_rows:
                self._count(table)
                self._queue(MESSAGES, table)
        if events:
            table = rows_table(events, CLIENT_SCHEMA, "journey")
            if table.num_rows:
                self._queue(CLIENTS, table)
        self._upload()

    def _count_routed(self, routed: pa.Table) -> None:
        """`_count` for `publish_table`'s rows, from its dictionary indices: tenant (one entry
        per publisher) and outcome (delivered or not) as one small integer per row, counted by
        value (a third of a group_by's cost)."""
        tenant, outcome = routed["tenant"].chunk(0), routed["outcome"].chunk(0)
        key = pc.add(pc.multiply(tenant.indices, 2), outcome.indices.cast(pa.int32()))
        tenants = tenant.dictionary.to_pylist()
        for entry in pc.value_counts(key).to_pylist():
            index, reached = divmod(entry["values"], 2)
            self.outcomes[(tenants[index], _REACHED[reached].as_py(), "")] += entry["counts"]

    def _count(self, messages: pa.Table) -> None:
        keys = ["tenant", "outcome"] + (["quota"] if "quota" in messages.column_names else [])
        counts = messages.select(keys).group_by(keys).aggregate([([], "count_all")])
        quotas = counts["quota"].to_pylist() if "quota" in keys else [None] * counts.num_rows
        for tenant, outcome, quota, count in zip(
            counts["tenant"].to_pylist(),
            counts["outcome"].to_pylist(),
            quotas,
            counts["count_all"].to_pylist(),
            strict=True,
        ):
            cause = quota or ""
            if cause and cause not in KNOWN_CAUSES:
                cause = "other"
            self.outcomes[(tenant, outcome, cause)] += count

    def _queue(self, stream: str, table: pa.Table) -> None:
        first_ms = table["ts"][0].value if table.num_rows else 0
        key = live_segment_key(stream, first_ms, self.writer_id, self._next_sequence())
        body = encode_segment(table)
        self._pending.append((key, body))
        self._pending_bytes += len(body)
        while self._pending_bytes > MAX_PENDING_BYTES and len(self._pending) > 1:
            lost_key, lost = self._pending.popleft()
            self._pending_bytes -= len(lost)
            self.dropped_segments += 1
            log.error("journey: object store unreachable; dropped segment %s", lost_key)

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def _upload(self) -> None:
        while self._pending:
            key, body = self._pending[0]
            try:
                self.store.put(key, body)
            except Exception:
                log.warning("journey: upload of %s failed; retried next round", key, exc_info=True)
                return
            self._pending.popleft()
            self._pending_bytes -= len(body)

    # -- /metrics ---------------------------------------------------------------------------

    def metrics(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "mqtt_journey_outcomes",
            "Outcomes of the tenant's PUBLISH packets (and later drops at a subscriber), by "
            "outcome and cause (the quota key; `other` for causes outside the known set)",
            labels=["tenant", "outcome", "cause"],
        )
        known = self.tenants() if self.tenants is not None else None
        for (tenant, outcome, cause), count in list(self.outcomes.items()):
            if known is None or tenant in known:
                family.add_metric([tenant, outcome, cause], count)
        yield family
        dropped = CounterMetricFamily(
            "mqtt_journey_segments_dropped",
            "Journey segments dropped because the object store stayed unreachable",
        )
        dropped.add_metric([], self.dropped_segments)
        yield dropped


def _log_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("journey batch failed", exc_info=future.exception())
