"""Retained messages and delayed publishes (`$delayed/{seconds}/{topic}`, EMQX's form) kept in
Postgres, so both survive restarts.

Retained changes are applied in order by one writer task (a retained topic set twice quickly must
end with the second value). Delayed publishes are written before the publisher is acknowledged
and deleted once delivered; at start-up both tables are loaded back.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.storage.persistence import _jsonable, _monotonic, _wall, restore_properties

log = logging.getLogger(__name__)


class RetainedAndDelayed:
    """The broker's `RetainedStorage` and `DelayedStorage` ports (data_plane.broker.ports):
    built on a pool, handed to `Broker(...)` in `Ports(retained_storage=, delayed_storage=)`,
    then `load(broker)` and `start()` before clients connect."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.broker: Broker | None = None  # the broker it serves: set by load()
        self.pool = pool
        self._changes: asyncio.Queue[Message] = asyncio.Queue()
        self._writer: asyncio.Task | None = None
        self._timers: set[asyncio.TimerHandle] = set()

    def retained_changed(self, message: Message) -> None:
        """Queue the change for the writer, which applies changes in order."""
        self._changes.put_nowait(message)

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write_retained())

    async def stop(self) -> None:
        # join(), not "until the queue is empty": the writer takes the last change off the queue
        # before writing it, and cancelling it then would lose that change.
        if self._writer is not None and not self._writer.done():
            await self._changes.join()
        if self._writer:
            self._writer.cancel()
        for timer in self._timers:
            timer.cancel()

    # -- retained -------------------------------------------------------------------------

    async def load(self, broker: Broker) -> tuple[int, int]:
        """Into `broker`, the one these are kept for: retained messages into its store, delayed
        ones armed to publish when due. Returns how many of each."""
        assert broker.retained_storage is self, "the broker was not built with this storage"
        self.broker = broker
        async with self.pool.connection() as conn:
            retained = await (
                await conn.execute(
                    "SELECT t.slug, r.topic, r.payload, r.qos, r.properties, r.expires_at"
                    f"  FROM {tables.RETAINED_MESSAGE} r JOIN {tables.TENANT} t ON t.id = r.tenant_id"
                    " WHERE r.expires_at IS NULL OR r.expires_at > now()"
                )
            ).fetchall()
            delayed = await (
                await conn.execute(
                    "SELECT d.id, t.slug, d.topic, d.payload, d.qos, d.retain, d.properties,"
                    "       d.publisher, d.deliver_at"
                    f"  FROM {tables.DELAYED_MESSAGE} d JOIN {tables.TENANT} t ON t.id = d.tenant_id"
                )
            ).fetchall()
        for slug, topic, payload, qos, properties, expires_at in retained:
            props = restore_properties(properties or {})
            broker.retained.set(
                Message(
                    topic, bytes(payload or b""), qos, True, props, _monotonic(expires_at), "", slug
                )
            )
        for row_id, slug, topic, payload, qos, retain, properties, publisher, at in delayed:
            message = Message(
                topic,
                bytes(payload or b""),
                qos,
                retain,
                restore_properties(properties or {}),
                None,
                publisher,
                slug,
            )
            self._arm(row_id, message, (at - datetime.now(UTC)).total_seconds())
        return len(retained), len(delayed)

    async def _write_retained(self) -> None:
        while True:
            message = await self._changes.get()
            try:
                async with self.pool.connection() as conn:
                    if message.payload:
                        await conn.execute(
                            f"""
                            INSERT INTO {tables.RETAINED_MESSAGE} (tenant_id, topic, payload,
                                object_key, qos, properties, expires_at, updated_at)
                            SELECT t.id, %s, %s, '', %s, %s, %s, now()
                              FROM {tables.TENANT} t WHERE t.slug = %s
                            ON CONFLICT (tenant_id, topic) DO UPDATE SET
                              payload = EXCLUDED.payload, qos = EXCLUDED.qos,
                              properties = EXCLUDED.properties,
                              expires_at = EXCLUDED.expires_at, updated_at = now()
                            """,
                            (
                                message.topic,
                                message.payload,
                                message.qos,
                                Jsonb(_jsonable(message.properties)),
                                _wall(message.expires_at),
                                message.tenant,
                            ),
                        )
                    else:
                        await conn.execute(
                            f"DELETE FROM {tables.RETAINED_MESSAGE} r USING {tables.TENANT} t"
                            " WHERE r.tenant_id = t.id AND t.slug = %s AND r.topic = %s",
                            (message.tenant, message.topic),
                        )
            except Exception as exc:
                log.warning("retained write for %s failed: %s", message.topic, exc)
            finally:
                self._changes.task_done()

    # -- delayed --------------------------------------------------------------------------

    def schedule(self, message: Message, delay: int) -> asyncio.Future:
        """Store, then arm a timer; the returned future resolves once stored."""
        return asyncio.get_running_loop().create_task(self._store_delayed(message, delay))

    async def _store_delayed(self, message: Message, delay: int) -> None:
        deliver_at = datetime.now(UTC) + timedelta(seconds=delay)
        async with self.pool.connection() as conn:
            row = await (
                await conn.execute(
                    f"""
                INSERT INTO {tables.DELAYED_MESSAGE} (tenant_id, topic, payload, object_key, qos,
                    retain, properties, publisher, deliver_at, created_at)
                SELECT t.id, %s, %s, '', %s, %s, %s, %s, %s, now()
                  FROM {tables.TENANT} t WHERE t.slug = %s
                RETURNING id
                """,
                    (
                        message.topic,
                        message.payload,
                        message.qos,
                        message.retain,
                        Jsonb(_jsonable(message.properties)),
                        message.publisher,
                        deliver_at,
                        message.tenant,
                    ),
                )
            ).fetchone()
        if row is None:
            raise RuntimeError(f"unknown tenant {message.tenant}")
        self._arm(row[0], message, delay)

    def _arm(self, row_id: int, message: Message, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self.broker.publish(message)
            loop.create_task(self._delete_delayed(row_id))

        handle = loop.call_later(max(0.0, delay), fire)
        self._timers.add(handle)

    async def _delete_delayed(self, row_id: int) -> None:
        try:
            async with self.pool.connection() as conn:
                await conn.execute(f"DELETE FROM {tables.DELAYED_MESSAGE} WHERE id = %s", (row_id,))
        except Exception as exc:
            log.warning("could not delete delivered delayed message %s: %s", row_id, exc)
