"""Changes the REST API made to shadows, published by one broker of the cluster
(`common.shadow.announcements` is the contract): each broker listens on the channel; the one
that takes a change's row (`published_at` still null) publishes its replies through the shadow
service, so they reach every node's subscribers once and are metered and told to the archive
like the replies of a device's own request. After its listener reconnects, a broker takes the
changes it may have missed meanwhile (up to `CATCH_UP_SECONDS` old: older ones are history,
not news)."""

from __future__ import annotations

import json
import logging
from typing import Any

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.notifications import ChangeKind
from common.shadow import announcements
from data_plane.shadows.service import ShadowService
from data_plane.tenancy.notifications import Change, ConfigListener

log = logging.getLogger(__name__)

_TAKE = """
UPDATE tenants_shadowversion v SET published_at = now()
  FROM tenants_tenant t
 WHERE t.id = v.tenant_id AND v.published_at IS NULL AND {which}
RETURNING v.id, t.slug, v.replies, v.actor, v.request
"""
_ONE = _TAKE.format(which="v.id = %s")
_MISSED = _TAKE.format(which="v.replies IS NOT NULL AND v.created_at > now() - %s::interval")


class Announcements:
    def __init__(self, dsn: str, pool: AsyncConnectionPool, service: ShadowService) -> None:
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
        version_id = change.get("id")
        if type(version_id) is int:
            await self._take(_ONE, (version_id,))

    async def _take(self, sql: str, args: tuple[Any, ...]) -> None:
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            rows = await (await cursor.execute(sql, args)).fetchall()
        for _id, tenant, replies, actor, request in sorted(rows):
            size = 1 if request is None else len(json.dumps(request, separators=(",", ":")))
            try:
                self.service.publish_change(tenant, replies or [], actor, size)
            except Exception:
                log.exception("publishing shadow change %s failed", _id)
            self.published += 1
