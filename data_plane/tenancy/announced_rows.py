"""Rows the control plane writes for the cluster to publish (shadow changes made over REST, jobs
notifications), announced with `pg_notify` on a channel of their own: each broker listens; the
one whose UPDATE takes a row (`published_at` still null) publishes it, so its messages reach
every node's subscribers once. After its listener reconnects, a broker takes the rows it may
have missed meanwhile (up to the contract's `CATCH_UP_SECONDS` old: older ones are history, not
news). A subclass names its SQL and what publishing a row means."""

from __future__ import annotations

import logging
from typing import Any

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts.notifications import ChangeKind
from data_plane.tenancy.notifications import Change, ConfigListener

log = logging.getLogger(__name__)


class AnnouncedRows:
    TAKE_ONE = ""  # takes the row whose id the notification names (`%s`)
    TAKE_MISSED = ""  # takes the rows not yet published of the last `%s::interval`
    WHAT = "row"  # for the log

    def __init__(
        self, dsn: str, pool: AsyncConnectionPool, channel: str, catch_up_seconds: int
    ) -> None:
        self.pool = pool
        self.catch_up = f"{catch_up_seconds} seconds"
        self.listener = ConfigListener(dsn, self.on_change, channel=channel)
        self.published = 0

    def start(self) -> None:
        self.listener.start()

    async def stop(self) -> None:
        await self.listener.stop()

    async def on_change(self, change: Change) -> None:
        if change.get("kind") == ChangeKind.RELOAD:  # the listener was away: what it missed
            await self._take(self.TAKE_MISSED, (self.catch_up,))
            return
        row_id = change.get("id")
        if type(row_id) is int:
            await self._take(self.TAKE_ONE, (row_id,))

    async def _take(self, sql: str, args: tuple[Any, ...]) -> None:
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            rows = await (await cursor.execute(sql, args)).fetchall()
        for row in sorted(rows):  # by id: in the order they were written
            try:
                self.publish(row)
            except Exception:
                log.exception("publishing %s %s failed", self.WHAT, row[0])
            self.published += 1

    def publish(self, row: tuple) -> None:
        raise NotImplementedError
