"""Notifications of jobs changes the control plane made, published by one broker of the cluster
(`common.jobs.announcements` is the contract; the shadows' announcements work the same way):
each broker listens on the channel; the one that takes a row (`published_at` still null)
publishes its messages through the jobs service. After its listener reconnects, a broker takes
the rows it may have missed meanwhile (up to `CATCH_UP_SECONDS` old)."""

from __future__ import annotations

import logging
from typing import Any

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.jobs import announcements
from common.notifications import ChangeKind
from data_plane.jobs.service import JobService
from data_plane.tenancy.notifications import Change, ConfigListener

log = logging.getLogger(__name__)

_TAKE = """
UPDATE tenants_jobannouncement a SET published_at = now()
  FROM tenants_tenant t
 WHERE t.id = a.tenant_id AND a.published_at IS NULL AND {which}
RETURNING a.id, t.slug, a.replies
"""
_ONE = _TAKE.format(which="a.id = %s")
_MISSED = _TAKE.format(which="a.created_at > now() - %s::interval")


class JobAnnouncements:
    def __init__(self, dsn: str, pool: AsyncConnectionPool, service: JobService) -> None:
        self.pool = pool
        self.service = service
        self.listener = ConfigListener(dsn, self.on_change, channel=announcements.CHANNEL)
        self.published = 0

    def start(self) -> None:
        self.listener.start()

    async def stop(self) -> None:
        await self.listener.stop()

    async def on_change(self, change: Change) -> None:
        if change.get("kind") == ChangeKind.RELOAD:  # the listener was away: what it missed
            await self._take(_MISSED, (f"{announcements.CATCH_UP_SECONDS} seconds",))
            return
        row_id = change.get("id")
        if type(row_id) is int:
            await self._take(_ONE, (row_id,))

    async def _take(self, sql: str, args: tuple[Any, ...]) -> None:
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            rows = await (await cursor.execute(sql, args)).fetchall()
        for row_id, tenant, replies in sorted(rows):
            try:
                self.service.publish_announced(tenant, replies or [])
            except Exception:
                log.exception("publishing jobs announcement %s failed", row_id)
            self.published += 1
