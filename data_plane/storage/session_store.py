"""Persistent MQTT sessions and their message queues in Postgres, with group commit.

One ordered queue per (tenant, client id): `tenants_mqttqueuedmessage` rows with a per-queue
`seq`. Writes (enqueue, ack, state changes) are collected for `commit_interval` seconds — or
until `max_batch` — and committed in one transaction (COPY for appends, array-driven DELETE and
UPDATE for the rest). Each write returns a future that resolves once its transaction committed:
the broker acknowledges a publish (PUBACK/PUBREC) only after awaiting it. Reads are ranges.

Payloads larger than `large_payload_threshold` go to the object store (`spilled_payloads`),
uploaded before the transaction that writes the row referencing them (`object_key`). The records
read and written are in `queue_records`.

A group commit holds every tenant's writes, so one write Postgres refuses must not fail the rest:
when a group's transaction fails and the database is not away, its writes are tried again one at
a time, each in its own transaction (`common.stores.isolation`); the one refused alone fails with
`StoreRefused` (its publisher gets a failure reason code), the others take effect. The broker's
CONNECT refuses what would make such a write (client ids longer than these tables hold).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.runtime.cancellation import cancel_and_wait
from common.stores.isolation import each_alone, is_away
from common.stores.object_store import ObjectStore
from data_plane.storage.group_commit import Args, Batch, Op, put, write_batch
from data_plane.storage.queue_records import (
    QUEUED,
    RECEIVED,
    SENT,
    QueuedMessage,
    StoredSession,
    StoreRefused,
    StoreUnavailable,
)
from data_plane.storage.spilled_payloads import LARGE_PAYLOAD_THRESHOLD, SpilledPayloads

__all__ = [
    "QUEUED",
    "RECEIVED",
    "SENT",
    "QueuedMessage",
    "SessionStore",
    "StoreUnavailable",
    "StoreRefused",
    "StoredSession",
]

log = logging.getLogger(__name__)


class SessionStore:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        commit_interval: float = 0.004,
        max_batch: int = 5000,
        object_store: ObjectStore | None = None,
        large_payload_threshold: int = LARGE_PAYLOAD_THRESHOLD,
    ) -> None:
        self.pool = pool
        self.payloads = SpilledPayloads(object_store, large_payload_threshold)
        self.commit_interval = commit_interval
        self.max_batch = max_batch
        self._batch = Batch()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[None] | None = None  # the commit running now
        self.batch_sizes: list[int] = []  # recent commit sizes, for the benchmark and metrics
        self.commits = 0

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._committer(), name="group-commit")

    async def stop(self) -> None:
        if self._task:
            self._wakeup.set()
            await cancel_and_wait(self._task)
            self._task = None
        if self._in_flight is not None and not self._in_flight.done():
            await asyncio.wait([self._in_flight])
        if len(self._batch):
            await self._commit(self._take())

    # -- group-committed writes ---------------------------------------------------------

    def spills(self, size: int) -> bool:
        """Whether a payload of `size` bytes is kept in the object store, not in its row."""
        return self.payloads.spills(size)

    @staticmethod
    def new_object_key(tenant_id: int) -> str:
        return SpilledPayloads.new_key(tenant_id)

    def enqueue(
        self, tenant_id: int, client_id: str, message: QueuedMessage
    ) -> asyncio.Future[None]:
        now = datetime.now(UTC)
        if message.object_key:
            self._batch.uploads[message.object_key] = message.payload
        return self._add(
            "insert",
            (
                tenant_id,
                client_id,
                message.seq,
                message.topic,
                None if message.object_key else message.payload,
                message.object_key,
                message.qos,
                message.retain,
                Jsonb(message.properties),
                message.packet_id,
                message.state,
                message.expires_at,
                now,
            ),
        )

    def ack(self, tenant_id: int, client_id: str, seq: int) -> asyncio.Future[None]:
        return self._add("delete", (tenant_id, client_id, seq))

    def mark(
        self, tenant_id: int, client_id: str, seq: int, packet_id: int | None, state: int
    ) -> asyncio.Future[None]:
        return self._add("mark", (tenant_id, client_id, seq, packet_id, state))

    def inbound_qos2(
        self, tenant_id: int, client_id: str, packet_id: int, held: bool
    ) -> asyncio.Future[None]:
        """Record that a client's QoS 2 packet id is held (PUBLISH taken) or released (PUBREL)."""
        return self._add("inbound", (tenant_id, client_id, packet_id, held))

    def _add(self, kind: str, args: Args) -> asyncio.Future[None]:
        put(self._batch, kind, args)
        future = self._future()
        self._batch.ops.append((kind, args, future))
        return future

    def stream_mark(self, node: str, entry: str) -> None:
        """Cluster node `node` delivered its forward stream up to `entry`: recorded in the
        transaction that commits those deliveries (data_plane.cluster.inherit). Nothing
        waiting to be written: those deliveries wrote nothing here, no mark is needed."""
        if len(self._batch):
            self._batch.stream_marks[node] = entry

    async def stream_mark_of(self, node: str) -> str | None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT entry FROM {tables.MQTT_STREAM_MARK} WHERE node = %s", (node,)
            )
            row = await cursor.fetchone()
        return row[0] if row else None

    async def forget_stream_mark(self, node: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(f"DELETE FROM {tables.MQTT_STREAM_MARK} WHERE node = %s", (node,))

    async def flushed(self) -> None:
        """Every write queued so far is committed (or failed): a session handed to another
        node of the cluster leaves nothing behind in this process."""
        # The queued group commits after the one in flight: waiting for it covers both. (Not
        # the one in flight first: the committer may take the queued group as that one ends,
        # before this resumes, and the queue looks empty while it still commits.)
        if len(self._batch):
            await asyncio.wait([self._future()])
        elif self._in_flight is not None and not self._in_flight.done():
            await asyncio.wait([self._in_flight])

    def _future(self) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self._batch.futures.append(future)
        if len(self._batch) >= self.max_batch or len(self._batch) == 1:
            self._wakeup.set()
        return future

    def _take(self) -> Batch:
        batch, self._batch = self._batch, Batch()
        return batch

    async def _committer(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Let more writes join this transaction (the group in group commit).
            if len(self._batch) < self.max_batch:
                await asyncio.sleep(self.commit_interval)
            batch = self._take()
            if len(batch):
                # Shielded and kept: stop() cancels this task, and cancelling a commit midway
                # would roll back a batch already taken off the queue; stop() waits for it.
                self._in_flight = asyncio.ensure_future(self._commit(batch))
                await asyncio.shield(self._in_flight)
            if len(self._batch):
                self._wakeup.set()

    async def _commit(self, batch: Batch) -> None:
        try:
            if batch.uploads:  # (the rows name them: none is written without its upload)
                await asyncio.to_thread(self.payloads.upload, batch.uploads)
        except Exception as exc:
            self._fail(batch, exc)
            return
        try:
            await write_batch(self.pool, batch)
        except Exception as exc:
            if is_away(exc) or not batch.ops:
                self._fail(batch, exc)
                return
            log.warning("group commit of %d writes failed (%s): each alone", len(batch), exc)
            await self._each_alone(batch)
            return
        self._done(batch)

    async def _each_alone(self, batch: Batch) -> None:
        """A failed group's writes, each in a transaction of its own, in order; then its stream
        marks (the deliveries they cover are settled: written, or refused and told so)."""

        async def alone(op: Op) -> None:
            one = Batch()
            put(one, op[0], op[1])
            await write_batch(self.pool, one)
            if not op[2].done():
                op[2].set_result(None)

        def refused(op: Op, exc: Exception) -> None:
            if not op[2].done():
                op[2].set_exception(StoreRefused(f"session store refused the write: {exc}"))

        try:
            await each_alone("session_store", batch.ops, alone, refused)
            if batch.stream_marks:
                await write_batch(self.pool, Batch(stream_marks=batch.stream_marks))
        except Exception as exc:  # away meanwhile: what is not settled yet fails as a whole
            self._fail(batch, exc)
            return
        self._done(batch)

    def _fail(self, batch: Batch, exc: Exception) -> None:
        log.warning("group commit of %d writes failed: %s", len(batch), exc)
        error = StoreUnavailable(f"session store unavailable: {exc}")
        for future in batch.futures:
            if not future.done():
                future.set_exception(error)

    def _done(self, batch: Batch) -> None:
        self.commits += 1
        self.batch_sizes.append(len(batch))
        del self.batch_sizes[:-1000]
        for future in batch.futures:
            if not future.done():
                future.set_result(None)

    # -- sessions -----------------------------------------------------------------------

    async def save_session(
        self,
        tenant_id: int,
        client_id: str,
        *,
        expiry_interval: int,
        subscriptions: list[dict[str, object]],
        will: dict[str, object] | None = None,
        expires_at: datetime | None = None,
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                f"""
                INSERT INTO {tables.MQTT_SESSION} (tenant_id, client_id, expiry_interval,
                    expires_at, subscriptions, will, next_packet_id, inbound_qos2, updated_at)
                VALUES (%s, %s, %s, %s, %s, %s, 1, '{{}}', now())
                ON CONFLICT (tenant_id, client_id) DO UPDATE SET
                    expiry_interval = EXCLUDED.expiry_interval, expires_at = EXCLUDED.expires_at,
                    subscriptions = EXCLUDED.subscriptions, will = EXCLUDED.will,
                    updated_at = now()
                """,
                (
                    tenant_id,
                    client_id,
                    expiry_interval,
                    expires_at,
                    Jsonb(subscriptions),
                    Jsonb(will) if will is not None else None,
                ),
            )

    async def save_will(
        self, tenant_id: int, client_id: str, will: dict[str, object] | None
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                f"UPDATE {tables.MQTT_SESSION} SET will = %s, updated_at = now()"
                " WHERE tenant_id = %s AND client_id = %s",
                (Jsonb(will) if will is not None else None, tenant_id, client_id),
            )

    async def delete_session(self, tenant_id: int, client_id: str) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                f"DELETE FROM {tables.MQTT_QUEUED_MESSAGE} WHERE tenant_id = %s AND client_id = %s",
                (tenant_id, client_id),
            )
            await conn.execute(
                f"DELETE FROM {tables.MQTT_SESSION} WHERE tenant_id = %s AND client_id = %s",
                (tenant_id, client_id),
            )

    async def load_session(self, tenant_id: int, client_id: str) -> StoredSession | None:
        sessions = await self._sessions(
            "s.tenant_id = %s AND s.client_id = %s", (tenant_id, client_id)
        )
        return sessions[0] if sessions else None

    async def load_session_of(self, tenant: str, client_id: str) -> StoredSession | None:
        """The unexpired session of (tenant slug, client id), or None."""
        sessions = await self._sessions(
            f"s.tenant_id = (SELECT id FROM {tables.TENANT} WHERE slug = %s)"
            " AND s.client_id = %s AND (s.expires_at IS NULL OR s.expires_at > now())",
            (tenant, client_id),
        )
        return sessions[0] if sessions else None

    async def live_sessions(self) -> list[StoredSession]:
        """Every unexpired session: the broker restores their subscriptions at start-up."""
        return await self._sessions("s.expires_at IS NULL OR s.expires_at > now()", ())

    async def _sessions(self, where: str, params: tuple[object, ...]) -> list[StoredSession]:
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(
                f"""
                SELECT s.tenant_id, s.client_id, s.expiry_interval, s.expires_at,
                       s.subscriptions, s.will, s.inbound_qos2,
                       (SELECT coalesce(max(q.seq), 0) FROM {tables.MQTT_QUEUED_MESSAGE} q
                         WHERE q.tenant_id = s.tenant_id AND q.client_id = s.client_id)
                  FROM {tables.MQTT_SESSION} s WHERE {where}
                """,
                params,
            )
            rows = await cursor.fetchall()
        return [
            StoredSession(
                tenant_id=r[0],
                client_id=r[1],
                expiry_interval=r[2],
                expires_at=r[3],
                subscriptions=r[4] or [],
                will=r[5],
                inbound_qos2=list(r[6] or []),
                last_seq=r[7],
            )
            for r in rows
        ]

    async def fetch(
        self, tenant_id: int, client_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[QueuedMessage]:
        """The queue in order from `after_seq`, skipping (and deleting) expired messages."""
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            await cursor.execute(
                f"""
                SELECT seq, topic, payload, qos, retain, properties, expires_at, packet_id,
                       state, object_key
                  FROM {tables.MQTT_QUEUED_MESSAGE}
                 WHERE tenant_id = %s AND client_id = %s AND seq > %s
                   AND (expires_at IS NULL OR expires_at > now())
                 ORDER BY seq LIMIT %s
                """,
                (tenant_id, client_id, after_seq, limit),
            )
            rows = await cursor.fetchall()
        messages = [
            QueuedMessage(
                seq=r[0],
                topic=r[1],
                payload=bytes(r[2] or b""),
                qos=r[3],
                retain=r[4],
                properties=r[5] or {},
                expires_at=r[6],
                packet_id=r[7],
                state=r[8],
                object_key=r[9],
            )
            for r in rows
        ]
        spilled = [m for m in messages if m.object_key]
        if spilled:
            await asyncio.to_thread(self.payloads.download, spilled)
        return messages

    async def collect_orphans(self, grace: float = 600.0) -> int:
        """Delete payload objects older than `grace` seconds that no queue row refers to."""
        return await self.payloads.collect_orphans(self.pool, grace)

    async def purge_expired(self) -> tuple[int, int]:
        """Delete expired sessions' queued messages, then expired sessions and messages;
        returns (messages of expired sessions, expired messages)."""
        async with self.pool.connection() as conn, conn.transaction():
            sessions = await conn.execute(
                f"""
                WITH gone AS (
                  DELETE FROM {tables.MQTT_SESSION} WHERE expires_at <= now()
                  RETURNING tenant_id, client_id)
                DELETE FROM {tables.MQTT_QUEUED_MESSAGE} q USING gone
                 WHERE q.tenant_id = gone.tenant_id AND q.client_id = gone.client_id
                """
            )
            messages = await conn.execute(
                f"DELETE FROM {tables.MQTT_QUEUED_MESSAGE} WHERE expires_at <= now()"
            )
        return sessions.rowcount, messages.rowcount
