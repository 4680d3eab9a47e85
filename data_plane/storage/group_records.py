"""Durable shared groups in Postgres (data_plane.broker.groups): a row per group in
`SHARED_GROUP_QUEUE`, its messages in the sessions' queue table under the group's holder id
(written, read and settled as a persistent session's queue: `session_store`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables


@dataclass(slots=True)
class StoredGroup:
    tenant_id: int
    name: str
    topic_filter: str
    holder_id: str
    expires_at: datetime | None
    last_seq: int  # the highest sequence number its queue used


async def save(
    pool: AsyncConnectionPool,
    tenant_id: int,
    name: str,
    topic_filter: str,
    holder_id: str,
    members: int,
    expires_at: datetime | None,
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            f"""
            INSERT INTO {tables.SHARED_GROUP_QUEUE} (tenant_id, name, topic_filter, holder_id,
                members, created_at, expires_at)
            VALUES (%s, %s, %s, %s, %s, now(), %s)
            ON CONFLICT (tenant_id, holder_id) DO UPDATE SET
                members = EXCLUDED.members, expires_at = EXCLUDED.expires_at
            """,
            (tenant_id, name, topic_filter, holder_id, members, expires_at),
        )


async def delete(pool: AsyncConnectionPool, tenant_id: int, holder_id: str) -> None:
    """The group and its messages go."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            f"DELETE FROM {tables.MQTT_QUEUED_MESSAGE} WHERE tenant_id = %s AND client_id = %s",
            (tenant_id, holder_id),
        )
        await conn.execute(
            f"DELETE FROM {tables.SHARED_GROUP_QUEUE} WHERE tenant_id = %s AND holder_id = %s",
            (tenant_id, holder_id),
        )


async def live(pool: AsyncConnectionPool) -> list[StoredGroup]:
    """Every group not past its end: the broker restores them at start-up."""
    async with pool.connection() as conn:
        cursor = conn.cursor(row_factory=tuple_row)
        await cursor.execute(
            f"""
            SELECT g.tenant_id, g.name, g.topic_filter, g.holder_id, g.expires_at,
                   (SELECT coalesce(max(q.seq), 0) FROM {tables.MQTT_QUEUED_MESSAGE} q
                     WHERE q.tenant_id = g.tenant_id AND q.client_id = g.holder_id)
              FROM {tables.SHARED_GROUP_QUEUE} g
             WHERE g.expires_at IS NULL OR g.expires_at > now()
            """
        )
        rows = await cursor.fetchall()
    return [StoredGroup(*row) for row in rows]


async def purge_expired(pool: AsyncConnectionPool) -> int:
    """Groups left without members past their retention (their broker gone before it ended
    them), with their messages; returns how many."""
    async with pool.connection() as conn, conn.transaction():
        gone = await conn.execute(
            f"""
            WITH gone AS (
              DELETE FROM {tables.SHARED_GROUP_QUEUE} WHERE expires_at <= now()
              RETURNING tenant_id, holder_id)
            DELETE FROM {tables.MQTT_QUEUED_MESSAGE} q USING gone
             WHERE q.tenant_id = gone.tenant_id AND q.client_id = gone.holder_id
            """
        )
    return gone.rowcount
