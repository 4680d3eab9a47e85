"""The session store's group commit: the writes gathered for one transaction (`Batch`) and that
transaction (`write_batch`): COPY for appends, array-driven DELETE and UPDATE for the rest. Each
write is kept too as it came (`Batch.ops`), so that a failed group can be written again one write
at a time (`session_store.SessionStore`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import AsyncConnectionPool

from common.contracts import tables

Args = tuple[Any, ...]  # a write's arguments, as the store's method took them
Op = tuple[str, Args, "asyncio.Future[None]"]  # (kind, arguments, its future)


@dataclass(slots=True)
class Batch:
    inserts: list[tuple[object, ...]] = field(default_factory=list)  # a queue_records row each
    deletes: list[tuple[int, str, int]] = field(default_factory=list)
    # (tenant id, client id, seq) -> (packet id, state). A dict, so the last mark of a delivery
    # wins: one UPDATE ... FROM joining a row twice applies an arbitrary one of the two (SENT
    # over RECEIVED would make a restart resend a PUBLISH the client was already released).
    updates: dict[tuple[int, str, int], tuple[int | None, int]] = field(default_factory=dict)
    uploads: dict[str, bytes] = field(default_factory=dict)
    # (tenant id, client id) -> {packet id: held}; the last change to an id wins.
    inbound: dict[tuple[int, str], dict[int, bool]] = field(default_factory=dict)
    futures: list[asyncio.Future[None]] = field(default_factory=list)
    # cluster node -> the last entry of its forward stream whose deliveries this batch holds
    stream_marks: dict[str, str] = field(default_factory=dict)
    # Each write as it came, with its own future: what is tried again one at a time when the
    # group's transaction fails (`put` adds one to the structures above).
    ops: list[Op] = field(default_factory=list)

    def __len__(self) -> int:  # (a stream mark rides with writes: never alone, not counted)
        return len(self.inserts) + len(self.deletes) + len(self.updates) + len(self.inbound)


def put(batch: Batch, kind: str, args: Args) -> None:
    if kind == "insert":
        batch.inserts.append(args)
    elif kind == "delete":
        batch.deletes.append(args)
    elif kind == "mark":
        batch.updates[args[:3]] = args[3:]
    else:
        batch.inbound.setdefault(args[:2], {})[args[2]] = args[3]


_COPY = (
    f"COPY {tables.MQTT_QUEUED_MESSAGE} (tenant_id, client_id, seq, topic, payload, object_key, qos,"
    " retain, properties, packet_id, state, expires_at, created_at) FROM STDIN"
)
_INBOUND = f"""
UPDATE {tables.MQTT_SESSION} SET inbound_qos2 = ARRAY(
    SELECT DISTINCT x FROM unnest(inbound_qos2 || %(held)s::int[]) AS x
     WHERE x <> ALL(%(released)s::int[]) ORDER BY x)
 WHERE tenant_id = %(tenant_id)s AND client_id = %(client_id)s
"""
_STREAM_MARK = f"""
INSERT INTO {tables.MQTT_STREAM_MARK} (node, entry, updated_at) VALUES (%s, %s, now())
ON CONFLICT (node) DO UPDATE SET entry = EXCLUDED.entry, updated_at = now()
"""
_DELETE = f"""
DELETE FROM {tables.MQTT_QUEUED_MESSAGE} q
 USING unnest(%s::bigint[], %s::text[], %s::bigint[]) AS a(tenant_id, client_id, seq)
 WHERE q.tenant_id = a.tenant_id AND q.client_id = a.client_id AND q.seq = a.seq
"""
_UPDATE = f"""
UPDATE {tables.MQTT_QUEUED_MESSAGE} q SET packet_id = a.packet_id, state = a.state
  FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::int[], %s::smallint[])
       AS a(tenant_id, client_id, seq, packet_id, state)
 WHERE q.tenant_id = a.tenant_id AND q.client_id = a.client_id AND q.seq = a.seq
"""


async def write_batch(pool: AsyncConnectionPool, batch: Batch) -> None:
    """`batch` in one transaction."""
    async with pool.connection() as conn:
        async with conn.transaction():
            cursor = conn.cursor()
            if batch.inserts:
                async with cursor.copy(_COPY) as copy:
                    for row in batch.inserts:
                        await copy.write_row(row)
            if batch.updates:
                rows = [(*key, *mark) for key, mark in batch.updates.items()]
                await cursor.execute(_UPDATE, [list(c) for c in zip(*rows, strict=True)])
            if batch.deletes:
                await cursor.execute(_DELETE, [list(c) for c in zip(*batch.deletes, strict=True)])
            if batch.stream_marks:
                await cursor.executemany(_STREAM_MARK, list(batch.stream_marks.items()))
            if batch.inbound:
                await cursor.executemany(
                    _INBOUND,
                    [
                        {
                            "tenant_id": tenant_id,
                            "client_id": client_id,
                            "held": [i for i, held in ids.items() if held],
                            "released": [i for i, held in ids.items() if not held],
                        }
                        for (tenant_id, client_id), ids in batch.inbound.items()
                    ],
                )
