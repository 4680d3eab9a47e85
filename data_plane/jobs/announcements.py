"""Notifications of jobs changes the control plane made, published by one broker of the cluster
(`common.jobs.announcements` is the contract, `data_plane.tenancy.announced_rows` the
mechanism): the broker that takes a row publishes its messages through the jobs service."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.jobs import announcements
from data_plane.jobs.service import JobService
from data_plane.tenancy.announced_rows import AnnouncedRows

_TAKE = f"""
UPDATE {tables.JOB_ANNOUNCEMENT} a SET published_at = now()
  FROM {tables.TENANT} t
 WHERE t.id = a.tenant_id AND a.published_at IS NULL AND {{which}}
RETURNING a.id, t.slug, a.replies
"""
_ONE = _TAKE.format(which="a.id = %s")
_MISSED = _TAKE.format(which="a.created_at > now() - %s::interval")


class JobAnnouncements(AnnouncedRows):
    TAKE_ONE, TAKE_MISSED, WHAT = _ONE, _MISSED, "jobs announcement"

    def __init__(self, dsn: str, pool: AsyncConnectionPool, service: JobService) -> None:
        super().__init__(dsn, pool, announcements.CHANNEL, announcements.CATCH_UP_SECONDS)
        self.service = service

    def publish(self, row: tuple) -> None:
        _id, tenant, replies = row
        self.service.publish_announced(tenant, replies or [])
