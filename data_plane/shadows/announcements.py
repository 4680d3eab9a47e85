"""Changes the REST API made to shadows, published by one broker of the cluster
(`common.shadow.announcements` is the contract, `data_plane.tenancy.announced_rows` the
mechanism): the broker that takes a change's row publishes its replies through the shadow
service, so they are metered and told to the archive like the replies of a device's own
request."""

from __future__ import annotations

import json

from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.shadow import announcements
from data_plane.shadows.service import ShadowService
from data_plane.tenancy.announced_rows import AnnouncedRows

_TAKE = f"""
UPDATE {tables.SHADOW_VERSION} v SET published_at = now()
  FROM {tables.TENANT} t
 WHERE t.id = v.tenant_id AND v.published_at IS NULL AND {{which}}
RETURNING v.id, t.slug, v.replies, v.actor, v.request
"""
_ONE = _TAKE.format(which="v.id = %s")
_MISSED = _TAKE.format(which="v.replies IS NOT NULL AND v.created_at > now() - %s::interval")


class Announcements(AnnouncedRows):
    TAKE_ONE, TAKE_MISSED, WHAT = _ONE, _MISSED, "shadow change"

    def __init__(self, dsn: str, pool: AsyncConnectionPool, service: ShadowService) -> None:
        super().__init__(dsn, pool, announcements.CHANNEL, announcements.CATCH_UP_SECONDS)
        self.service = service

    def publish(self, row: tuple) -> None:
        _id, tenant, replies, actor, request = row
        size = 1 if request is None else len(json.dumps(request, separators=(",", ":")))
        self.service.publish_change(tenant, replies or [], actor, size)
