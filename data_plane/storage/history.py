"""The broker's `History` port (data_plane.broker.ports; replays: data_plane.broker.replay): a
tenant's archived messages read back in order, and how far back its history reaches.

`read` goes an hour at a time through the archive's readers (`common.archive.files`: the
marker protocol, live segments and compacted history alike), keeps the tenant's publishes in
the time range whose topic the filter matches, and orders them by archive time — stably, so one
broker's messages of one millisecond keep their recording order — before it hands them over in
batches. An hour compacted while it was being read is read again (`ArchiveChanged`).

`horizon` is what retention leaves: the tenant's longest history policy (or, with none, its
plan's default days) back from now; read for every tenant at start-up and again for one on the
changes that move it (the archive decisions' own: history, quota, settings).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from psycopg_pool import AsyncConnectionPool

from common.archive.files import ArchiveChanged, hours_between, iter_archive
from common.archive.schema import EVENT_PUBLISH, MESSAGE_ID
from common.contracts import tables
from common.contracts.notifications import ChangeKind
from common.mqtt.topics import topic_matches
from common.stores.object_store import ObjectStore
from data_plane.broker.message import Message
from data_plane.storage.archive_hook import ArchiveTap

log = logging.getLogger(__name__)

BATCH = 1000  # messages handed over at a time
DAY = 86_400
_DAYS_SQL = f"""
SELECT t.slug, CASE WHEN NOT t.archive_enabled THEN 0
       ELSE COALESCE((SELECT max(h.days) FROM {tables.HISTORY_POLICY} h WHERE h.tenant_id = t.id),
                     p.history_default_days) END
  FROM {tables.TENANT} t JOIN {tables.PLAN} p ON p.id = t.plan_id
"""
_CHANGES = frozenset(
    {ChangeKind.HISTORY_CHANGED, ChangeKind.TENANT_QUOTA, ChangeKind.TENANT_SETTINGS}
)
_PROPERTY_COLUMNS = (
    "payload_format",
    "content_type",
    "user_properties",
    "message_expiry",
    "response_topic",
    "correlation_data",
)
_COLUMNS = ("ts", "client_id", "topic", "qos", "payload", *_PROPERTY_COLUMNS)
# A live segment's rows' message ids are `{writer}-{sequence}:{row}` (common.archive.schema):
# the writer is what comes before the sequence.
_WRITER = r"^(?P<writer>.+)-[0-9]+:[0-9]+$"


class ArchiveHistory:
    def __init__(self, tap: ArchiveTap, store: ObjectStore, pool: AsyncConnectionPool) -> None:
        self.tap = tap
        self.store = store
        self.pool = pool
        self.days: dict[str, int] = {}  # tenant -> days its history keeps (0: none)

    # -- how far back -----------------------------------------------------------------------

    async def load(self, tenant: str | None = None) -> None:
        sql, params = (
            (_DAYS_SQL, ()) if tenant is None else (_DAYS_SQL + " WHERE t.slug = %s", (tenant,))
        )
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(sql, params)).fetchall()
        if tenant is None:
            self.days = {slug: int(days or 0) for slug, days in rows}
        else:
            self.days.pop(tenant, None)
            self.days.update({slug: int(days or 0) for slug, days in rows})

    async def on_change(self, change: dict[str, object]) -> None:
        kind, tenant = str(change.get("kind", "")), change.get("tenant")
        if kind == ChangeKind.RELOAD:
            await self.load()
        elif kind in _CHANGES and isinstance(tenant, str) and tenant:
            await self.load(tenant)

    def horizon(self, tenant: str) -> float | None:
        days = self.days.get(tenant, 0)
        return time.time() - days * DAY if days else None

    # -- the messages -------------------------------------------------------------------------

    async def written(self) -> None:
        await self.tap.written()

    @property
    def writer(self) -> str:
        return self.tap.writer.writer_id

    def read(
        self,
        tenant: str,
        topic_filter: str,
        start_ms: int,
        end_ms: int,
        ends: Mapping[str, int] | None = None,
    ) -> Iterator[list[Message]]:
        start = datetime.fromtimestamp(start_ms / 1000, UTC)
        last_ms = max([end_ms, *ends.values()]) if ends else end_ms
        end = datetime.fromtimestamp(last_ms / 1000, UTC)
        for hour in hours_between(start, end):
            lo, hi = max(start, hour), min(end, hour + timedelta(hours=1))
            if lo >= hi:
                continue
            # Past `end_ms` only the writers `ends` names go on (each to its own end): their
            # rows are told apart by their message ids, read only for the hours that need it.
            by_writer = bool(ends) and _ms(hi) > end_ms
            table = self._hour(tenant, lo, hi, by_writer)
            if by_writer:
                table = _before_ends(table, end_ms, ends or {})
            for start_row in range(0, table.num_rows, BATCH):
                batch = _messages(tenant, topic_filter, table.slice(start_row, BATCH))
                if batch:
                    yield batch

    def _hour(self, tenant: str, start: datetime, end: datetime, with_ids: bool) -> pa.Table:
        columns = [*_COLUMNS, MESSAGE_ID] if with_ids else list(_COLUMNS)
        for attempt in range(3):
            try:
                tables_ = [
                    t.select(columns)
                    for t in iter_archive(
                        self.store, start, end, tenant, (EVENT_PUBLISH,), with_ids=with_ids
                    )
                ]
                break
            except ArchiveChanged:
                if attempt == 2:
                    raise
        if not tables_:
            return pa.table({name: pa.array([], pa.string()) for name in columns})
        table = pa.concat_tables(tables_, promote_options="permissive")
        order = pc.sort_indices(table, sort_keys=[("ts", "ascending")])  # stable
        return table.take(order)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _before_ends(table: pa.Table, end_ms: int, ends: Mapping[str, int]) -> pa.Table:
    """The rows before their writer's end in `ends` (`end_ms` for writers it does not name,
    and rows whose writer is not known), without the message ids."""
    if not table.num_rows:
        return table.drop_columns([MESSAGE_ID])
    writers = pc.struct_field(pc.extract_regex(table[MESSAGE_ID], _WRITER), [0])
    names = pa.array(list(ends), pa.string())
    values = pa.array(list(ends.values()), pa.int64())
    row_ends = pc.fill_null(pc.take(values, pc.index_in(writers, value_set=names)), end_ms)
    keep = pc.less(table["ts"].cast(pa.int64()), row_ends)
    return table.filter(keep).drop_columns([MESSAGE_ID])


def _messages(tenant: str, topic_filter: str, table: pa.Table) -> list[Message]:
    """The rows of `table` on topics the filter matches, as messages (column by column: the
    properties only where a column has any)."""
    topics = table.column("topic").to_pylist()
    matched = {topic: topic_matches(topic_filter, topic) for topic in set(topics)}
    payloads = table.column("payload").to_pylist()
    qos = table.column("qos").to_pylist()
    publishers = table.column("client_id").to_pylist()
    plain = all(table.column(c).null_count == len(table) for c in _PROPERTY_COLUMNS)
    rows = None if plain else table.select(["ts", *_PROPERTY_COLUMNS]).to_pylist()
    out = []
    for i, topic in enumerate(topics):
        if not matched[topic]:
            continue
        if rows is None:
            out.append(
                Message(
                    topic,
                    payloads[i] or b"",
                    qos[i] or 0,
                    False,
                    {},
                    None,
                    publishers[i] or "",
                    tenant,
                )
            )
            continue
        row = rows[i]
        row.update(topic=topic, payload=payloads[i], qos=qos[i], client_id=publishers[i])
        message = _message(tenant, row)
        if message is not None:
            out.append(message)
    return out


def _message(tenant: str, row: dict) -> Message | None:
    """An archived publish as the broker's message; None when its expiry has passed."""
    properties: dict[str, object] = {}
    if row["payload_format"] is not None:
        properties["payload_format_indicator"] = row["payload_format"]
    for column, name in (
        ("content_type", "content_type"),
        ("response_topic", "response_topic"),
        ("correlation_data", "correlation_data"),
    ):
        if row[column] is not None:
            properties[name] = row[column]
    if row["user_properties"]:
        properties["user_property"] = [(p["key"], p["value"]) for p in row["user_properties"]]
    expires_at = None
    if row["message_expiry"] is not None:
        left = row["ts"].timestamp() + row["message_expiry"] - time.time()
        if left <= 0:
            return None
        properties["message_expiry_interval"] = int(left)
        expires_at = time.monotonic() + left
    return Message(
        row["topic"],
        row["payload"] or b"",
        row["qos"] or 0,
        False,
        properties,
        expires_at,
        row["client_id"] or "",
        tenant,
    )
