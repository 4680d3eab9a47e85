"""Broker hooks for the tenancy layer: usage metering, device last-seen, and the tenant's own
`$events/client_connected` / `$events/client_disconnected` topics (EMQX style).

Everything is aggregated in memory and written by one periodic task, never per message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict

from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.runtime.cancellation import cancel_and_wait
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.message import Message
from data_plane.broker.session import Delivery, Session
from data_plane.storage.usage_log import UsageLogWriter
from data_plane.tenancy.metering import UsageMeter

log = logging.getLogger(__name__)

_LAST_SEEN = f"""
UPDATE {tables.DEVICE} d SET last_seen_at = to_timestamp(a.seen)
  FROM unnest(%s::text[], %s::text[], %s::float8[]) AS a(tenant, device, seen)
  JOIN {tables.TENANT} t ON t.slug = a.tenant
 WHERE d.tenant_id = t.id AND d.name = a.device
"""


class TenancyObservers:
    def __init__(
        self,
        broker: Broker,
        pool: AsyncConnectionPool,
        *,
        flush_interval: float = 10.0,
        usage_writer: UsageLogWriter | None = None,
    ) -> None:
        self.broker = broker
        self.usage_writer = usage_writer  # usage records to the object store, for billing
        self.pool = pool
        self.meter = UsageMeter()
        self.flush_interval = flush_interval
        self._seen: dict[tuple[str, str], float] = {}
        self._task: asyncio.Task | None = None
        hooks = broker.hooks
        hooks.add("client.connected", self._connected)
        hooks.add("client.disconnected", self._disconnected)
        # Messages and bytes are not hooked per message: they are sampled from the broker's
        # per-tenant counters every second (`_sample`), keeping the publish path lean.
        self._counted: dict[str, tuple[int, int, int, int, int]] = {}
        # Storage is not sampled here: each broker sees only its own copy of retained messages
        # and its own sessions, so per-broker samples double count or miss. The control plane
        # samples it once an hour for every tenant (tenants/usage/storage.py).
        hooks.add("message.dropped", self._dropped)
        # Quota refusals are metered beside drops, as `quota_<key>` causes.
        hooks.add("quota.exceeded", lambda tenant, key: self.meter.dropped(tenant, f"quota_{key}"))
        # Slowdowns (a publisher paused, deliveries paced) are not drops: metered apart, by key.
        hooks.add("quota.throttled", self.meter.throttled)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-flush")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self.flush(final=True)

    # -- hooks ----------------------------------------------------------------------------

    def _event(self, conn: MQTTConnection, name: str) -> None:
        payload = {
            "clientid": conn.client_id,
            "username": f"{conn.tenant}/{conn.device}",
            "peername": conn.peer,
            "proto_ver": conn.protocol_version,
            "ts": int(time.time() * 1000),
        }
        self.broker.publish(
            Message(
                f"$events/{name}",
                json.dumps(payload).encode(),
                0,
                False,
                tenant=conn.tenant,
                publisher="$events",
            )
        )

    def _connected(self, conn: MQTTConnection) -> None:
        self.meter.connected(conn.tenant)
        self.meter.connection_opened(conn, conn.tenant, conn.device)
        self._seen[(conn.tenant, conn.device)] = time.time()
        self._event(conn, "client_connected")

    def _disconnected(self, conn: MQTTConnection) -> None:
        self.meter.disconnected(conn.tenant)
        self.meter.connection_closed(conn)
        self._seen[(conn.tenant, conn.device)] = time.time()
        self._event(conn, "client_disconnected")

    def _sample(self) -> None:
        """Charge the tenants' traffic since the last sample to the current minute (the broker's
        own $events/$SYS traffic is not billed)."""
        for tenant, stats in list(self.broker.stats.items()):
            now = (
                stats.messages_received - stats.system_received,
                stats.bytes_received - stats.system_bytes_received,
                stats.messages_sent - stats.system_sent,
                stats.bytes_sent - stats.system_bytes_sent,
                stats.message_units,
            )
            before = self._counted.get(tenant, (0, 0, 0, 0, 0))
            if now != before:
                self._counted[tenant] = now
                self.meter.add(
                    tenant,
                    messages_in=now[0] - before[0],
                    bytes_in=now[1] - before[1],
                    messages_out=now[2] - before[2],
                    bytes_out=now[3] - before[3],
                    message_units=now[4] - before[4],
                )
            if stats.device_units:  # swapped out: the broker counts on into a fresh dict
                by_device, stats.device_units = stats.device_units, defaultdict(int)
                self.meter.device_units(tenant, by_device)

    def _dropped(self, session: Session, delivery: Delivery, cause: str) -> None:
        self.meter.dropped(session.tenant, cause)

    # -- flushing -------------------------------------------------------------------------

    async def _run(self) -> None:
        next_flush = time.monotonic() + self.flush_interval
        while True:
            await asyncio.sleep(min(1.0, self.flush_interval))
            self._sample()
            if time.monotonic() < next_flush:
                continue
            next_flush = time.monotonic() + self.flush_interval
            try:
                await self.flush()
            except Exception as exc:  # the database may be away: keep counting, retry later
                log.warning("usage flush failed: %s", exc)

    async def flush(self, final: bool = False) -> None:
        self._sample()
        for tenant in list(self.broker.stats):
            self.meter.gauge(tenant, retained_count=self.broker.retained.count(tenant))
        seen, self._seen = self._seen, {}
        async with self.pool.connection() as conn:
            await self.meter.flush(conn, final=final, exported=self._export)
            if seen:
                keys = list(seen)
                await conn.execute(
                    _LAST_SEEN,
                    ([t for t, _ in keys], [d for _, d in keys], [seen[k] for k in keys]),
                )
        if self.usage_writer is not None:
            await self.usage_writer.flush(force=final)

    def _export(self, rows: list) -> None:
        if self.usage_writer is not None:
            self.usage_writer.append_minutes(rows)
