"""Payloads too large for a queue row, kept in the object store (the session store's).

A payload larger than `threshold` goes under `payloads/{tenant_id}/{created_ms}-{uuid}`, uploaded
before the transaction that writes the row referencing it (`object_key`); one object serves
every queue the message was copied to. Acknowledged rows leave their object behind:
`collect_orphans` deletes objects no row refers to once they are older than a grace period (an
upload whose row is not committed yet is young).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.stores.object_store import ObjectNotFound, ObjectStore
from data_plane.storage.queue_records import QueuedMessage, StoreUnavailable

log = logging.getLogger(__name__)

LARGE_PAYLOAD_THRESHOLD = 256 * 1024
PAYLOAD_PREFIX = "payloads/"


class SpilledPayloads:
    def __init__(self, object_store: ObjectStore | None, threshold: int) -> None:
        self.object_store = object_store
        self.threshold = threshold

    def spills(self, size: int) -> bool:
        """Whether a payload of `size` bytes is kept in the object store, not in its row."""
        return self.object_store is not None and size > self.threshold

    @staticmethod
    def new_key(tenant_id: int) -> str:
        return f"{PAYLOAD_PREFIX}{tenant_id}/{int(time.time() * 1000)}-{uuid.uuid4().hex}"

    def upload(self, uploads: dict[str, bytes]) -> None:
        """Before the commit of the rows that refer to them (worker thread)."""
        if self.object_store is None:
            raise StoreUnavailable("no object store for large payloads")
        for key, data in uploads.items():
            self.object_store.put(key, data)

    def download(self, messages: list[QueuedMessage]) -> None:
        """Fill in the payloads of rows read back (worker thread)."""
        if self.object_store is None:
            raise StoreUnavailable("queued payloads are in an object store that is not configured")
        for message in messages:
            try:
                message.payload = self.object_store.get(message.object_key)
            except ObjectNotFound:
                # Not ours to invent a payload; say so loudly and deliver it empty.
                log.error("queued payload object %s is missing", message.object_key)

    async def collect_orphans(self, pool: AsyncConnectionPool, grace: float = 600.0) -> int:
        """Delete payload objects older than `grace` seconds that no queue row refers to."""
        store = self.object_store
        if store is None:
            return 0
        keys = await asyncio.to_thread(store.list, PAYLOAD_PREFIX)
        cutoff_ms = (time.time() - grace) * 1000
        old = [k for k in keys if _created_ms(k) < cutoff_ms]
        if not old:
            return 0
        async with pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT DISTINCT object_key FROM {tables.MQTT_QUEUED_MESSAGE}"
                " WHERE object_key = ANY(%s)",
                (old,),
            )
            referenced = {row[0] for row in await cursor.fetchall()}
        orphans = [k for k in old if k not in referenced]
        if orphans:

            def delete_orphans() -> None:
                for key in orphans:
                    store.delete(key)

            await asyncio.to_thread(delete_orphans)
            log.info("collected %d orphaned payload objects", len(orphans))
        return len(orphans)


def _created_ms(key: str) -> float:
    """The creation time in a payload key; unparseable keys count as new (never collected)."""
    try:
        return float(key.rsplit("/", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return float("inf")
