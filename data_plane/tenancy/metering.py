"""Usage metering: per tenant per minute, aggregated in memory and flushed in batches.

The broker calls the counters on its hot path (dict lookups and additions only); `flush()` writes
every finished minute — and, with `final=True`, the current one — to the control plane's
`tenants_usage` table with one upserting `executemany`, never a database write per message, and
hands the same rows on (`exported`) to the usage log in the object store, the source of the bill.

Drops and slowdowns are kept apart: `dropped` counts what was not taken or not delivered (by cause;
a quota's refusals as `quota_<key>`), `throttled` what a limit only slowed down (a publisher paused,
deliveries paced: by quota key). Neither is billed; the portal and `GET /api/v1/quota` show them.

Per device, each minute also keeps the message units, connection minutes and shadow operations
of each device (`devices`; a shadow operation counts to the thing whose shadow it is, whoever
asked), written beside the minute to `tenants_deviceusage`, one row per device and UTC day (for
`GET /api/v1/usage?by=device`, the portal and the invoice CSV's drill-down). The usage log, the
bill's source, stays per tenant: its rows, and so the invoices, are the same as without devices.

Device shadow operations are metered apart, in AWS's 1 KiB units (`shadow_operations`).

Billable units are AWS IoT Core's (see `common.archive.schema`): `message_units` in 5 KiB
increments (the broker counts them in its per-tenant stats), `connection_minutes` per connection
with partial minutes rounded up — a connection opened at t0 is charged one minute at t0, and one
more each time it is still open at t0 + 60 s·k, each charge to the minute it falls in, so a
connection held d seconds costs ceil(d / 60) minutes (at least one). `storage_byte_hours` stays 0
here: storage is sampled once an hour for all tenants by the control plane
(tenants/usage/storage.py), never per broker.
"""

from __future__ import annotations

import heapq
import itertools
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection

from common.contracts import tables
from common.stores.isolation import batch_else_each
from data_plane.broker.connection import MQTTConnection

_DEVICE_UPSERT = f"""
INSERT INTO {tables.DEVICE_USAGE} (tenant_id, device, day, message_units, connection_minutes,
                                 shadow_operations)
SELECT t.id, %s, %s::date, %s, %s, %s FROM {tables.TENANT} t WHERE t.slug = %s
ON CONFLICT (tenant_id, device, day) DO UPDATE SET
  message_units = {tables.DEVICE_USAGE}.message_units + EXCLUDED.message_units,
  connection_minutes = {tables.DEVICE_USAGE}.connection_minutes + EXCLUDED.connection_minutes,
  shadow_operations = {tables.DEVICE_USAGE}.shadow_operations + EXCLUDED.shadow_operations
"""

_UPSERT = f"""
INSERT INTO {tables.USAGE} (tenant_id, minute, connection_seconds, messages_in, messages_out,
                           bytes_in, bytes_out, dropped, throttled, retained_count, stored_bytes,
                           message_units, connection_minutes, storage_byte_hours,
                           rules_triggered, actions_executed, shadow_operations)
SELECT t.id, to_timestamp(%s), %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s, %s, %s, 0, 0,
       %s
  FROM {tables.TENANT} t WHERE t.slug = %s
ON CONFLICT (tenant_id, minute) DO UPDATE SET
  message_units = {tables.USAGE}.message_units + EXCLUDED.message_units,
  shadow_operations = {tables.USAGE}.shadow_operations + EXCLUDED.shadow_operations,
  connection_minutes = {tables.USAGE}.connection_minutes + EXCLUDED.connection_minutes,
  storage_byte_hours = {tables.USAGE}.storage_byte_hours + EXCLUDED.storage_byte_hours,
  connection_seconds = {tables.USAGE}.connection_seconds + EXCLUDED.connection_seconds,
  messages_in = {tables.USAGE}.messages_in + EXCLUDED.messages_in,
  messages_out = {tables.USAGE}.messages_out + EXCLUDED.messages_out,
  bytes_in = {tables.USAGE}.bytes_in + EXCLUDED.bytes_in,
  bytes_out = {tables.USAGE}.bytes_out + EXCLUDED.bytes_out,
  dropped = COALESCE((
    SELECT jsonb_object_agg(k, COALESCE(({tables.USAGE}.dropped ->> k)::bigint, 0)
                               + COALESCE((EXCLUDED.dropped ->> k)::bigint, 0))
      FROM jsonb_object_keys({tables.USAGE}.dropped || EXCLUDED.dropped) AS k), '{{}}'::jsonb),
  throttled = COALESCE((
    SELECT jsonb_object_agg(k, COALESCE(({tables.USAGE}.throttled ->> k)::bigint, 0)
                               + COALESCE((EXCLUDED.throttled ->> k)::bigint, 0))
      FROM jsonb_object_keys({tables.USAGE}.throttled || EXCLUDED.throttled) AS k), '{{}}'::jsonb),
  retained_count = GREATEST({tables.USAGE}.retained_count, EXCLUDED.retained_count),
  stored_bytes = GREATEST({tables.USAGE}.stored_bytes, EXCLUDED.stored_bytes)
"""


@dataclass(slots=True)
class MinuteUsage:
    connection_seconds: float = 0.0
    messages_in: int = 0
    messages_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # quota key -> slowdowns (nothing refused): `publish_rate`, `device_publish_rate`,
    # `inbound_bytes_rate` (a publisher paused), `outbound_rate` (deliveries paced)
    throttled: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    retained_count: int = 0
    stored_bytes: int = 0
    message_units: int = 0
    connection_minutes: int = 0
    storage_byte_hours: int = 0
    shadow_operations: int = 0  # device shadow operations, in AWS's 1 KiB units
    # device name -> [message units, connection minutes, shadow operations] of this minute
    devices: dict[str, list[int]] = field(default_factory=dict)

    def device(self, name: str) -> list[int]:
        entry = self.devices.get(name)
        if entry is None:
            entry = self.devices[name] = [0, 0, 0]
        return entry


class UsageMeter:
    def __init__(self, clock=time.time) -> None:
        self._clock = clock
        self._minutes: dict[tuple[str, int], MinuteUsage] = {}
        self._connected: dict[str, int] = defaultdict(int)
        self._accounted_until = clock()
        # Open connections for connection-minutes: key -> (tenant, next charge time, token), and
        # a heap of (next charge, token) so a tick only looks at the connections that are due.
        # The heap holds tokens, never the keys (connections): a closed connection's entry stays
        # in the heap until its minute is up, and must not keep the connection alive meanwhile
        # (at 1,000 closes a second that would pin 60,000 dead connections).
        self._open: dict[MQTTConnection, tuple[str, float, int, str]] = {}
        self._keys: dict[int, MQTTConnection] = {}  # token -> key, for open connections only
        self._due: list[tuple[float, int]] = []
        self._tokens = itertools.count()

    def _current(self, tenant: str) -> MinuteUsage:
        key = (tenant, int(self._clock() // 60) * 60)
        usage = self._minutes.get(key)
        if usage is None:
            usage = self._minutes[key] = MinuteUsage()
        return usage

    def message_in(self, tenant: str, size: int) -> None:
        usage = self._current(tenant)
        usage.messages_in += 1
        usage.bytes_in += size

    def message_out(self, tenant: str, size: int) -> None:
        usage = self._current(tenant)
        usage.messages_out += 1
        usage.bytes_out += size

    def add(
        self,
        tenant: str,
        *,
        messages_in: int,
        bytes_in: int,
        messages_out: int,
        bytes_out: int,
        message_units: int = 0,
    ) -> None:
        usage = self._current(tenant)
        usage.messages_in += messages_in
        usage.bytes_in += bytes_in
        usage.messages_out += messages_out
        usage.bytes_out += bytes_out
        usage.message_units += message_units

    def device_units(self, tenant: str, units: dict[str, int]) -> None:
        """Message units by device (already counted in the tenant's `message_units` by `add`)."""
        usage = self._current(tenant)
        for device, count in units.items():
            usage.device(device)[0] += count

    def shadow_operations(self, tenant: str, units: int, thing: str = "") -> None:
        """A device shadow operation (`data_plane.shadows`), in AWS's 1 KiB units, on `thing`'s
        shadow (the device it counts to: a thing is a device of the tenant)."""
        usage = self._current(tenant)
        usage.shadow_operations += units
        usage.device(thing)[2] += units

    def _charge_minute(self, tenant: str, at: float, device: str) -> None:
        key = (tenant, int(at // 60) * 60)
        usage = self._minutes.get(key) or self._minutes.setdefault(key, MinuteUsage())
        usage.connection_minutes += 1
        usage.device(device)[1] += 1

    def connection_opened(self, key: MQTTConnection, tenant: str, device: str = "") -> None:
        now = self._clock()
        self._charge_minute(tenant, now, device)
        token = next(self._tokens)
        self._open[key] = (tenant, now + 60, token, device)
        self._keys[token] = key
        heapq.heappush(self._due, (now + 60, token))

    def connection_closed(self, key: MQTTConnection) -> None:
        entry = self._open.pop(key, None)
        if entry is None:
            return
        tenant, due, token, device = entry
        del self._keys[token]
        now = self._clock()
        while due < now:  # minutes begun since the last tick (a minute begun is a minute billed)
            self._charge_minute(tenant, due, device)
            due += 60

    def _charge_open_connections(self) -> None:
        now = self._clock()
        while self._due and self._due[0][0] <= now:
            due, token = heapq.heappop(self._due)
            key = self._keys.get(token)
            entry = self._open.get(key) if key is not None else None
            if entry is None or entry[1] != due:
                continue  # closed, or already charged past this point
            tenant, device = entry[0], entry[3]
            while due <= now:
                self._charge_minute(tenant, due, device)
                due += 60
            self._open[key] = (tenant, due, token, device)  # type: ignore[index]  # an entry: key is not None
            heapq.heappush(self._due, (due, token))

    def dropped(self, tenant: str, cause: str, count: int = 1) -> None:
        self._current(tenant).dropped[cause] += count

    def throttled(self, tenant: str, key: str, count: int = 1) -> None:
        """A limit slowed something down (the `quota.throttled` hook): not a drop."""
        self._current(tenant).throttled[key] += count

    def gauge(
        self, tenant: str, *, retained_count: int | None = None, stored_bytes: int | None = None
    ) -> None:
        usage = self._current(tenant)
        if retained_count is not None:
            usage.retained_count = retained_count
        if stored_bytes is not None:
            usage.stored_bytes = stored_bytes

    def connected(self, tenant: str) -> None:
        self._account_connections()
        self._connected[tenant] += 1

    def disconnected(self, tenant: str) -> None:
        self._account_connections()
        self._connected[tenant] = max(0, self._connected[tenant] - 1)

    def _account_connections(self) -> None:
        """Charge connection-seconds since the last accounting to the minutes they fell in."""
        now = self._clock()
        start = self._accounted_until
        self._accounted_until = now
        while start < now:
            minute = int(start // 60) * 60
            end = min(now, minute + 60)
            for tenant, count in self._connected.items():
                if count:
                    key = (tenant, minute)
                    usage = self._minutes.get(key) or self._minutes.setdefault(key, MinuteUsage())
                    usage.connection_seconds += count * (end - start)
            start = end

    def take(self, *, final: bool = False) -> list[tuple[str, int, MinuteUsage]]:
        """Remove and return finished minutes (all minutes with `final`)."""
        self._account_connections()
        self._charge_open_connections()
        current = int(self._clock() // 60) * 60
        done = [key for key in self._minutes if final or key[1] < current]
        return [(tenant, minute, self._minutes.pop((tenant, minute))) for tenant, minute in done]

    def restore(self, rows: list[tuple[str, int, MinuteUsage]]) -> None:
        """Put rows back after a failed flush so the next one retries them."""
        for tenant, minute, usage in rows:
            existing = self._minutes.get((tenant, minute))
            if existing is None:
                self._minutes[(tenant, minute)] = usage
                continue
            existing.connection_seconds += usage.connection_seconds
            existing.messages_in += usage.messages_in
            existing.messages_out += usage.messages_out
            existing.bytes_in += usage.bytes_in
            existing.bytes_out += usage.bytes_out
            existing.message_units += usage.message_units
            existing.connection_minutes += usage.connection_minutes
            existing.storage_byte_hours += usage.storage_byte_hours
            existing.shadow_operations += usage.shadow_operations
            for cause, count in usage.dropped.items():
                existing.dropped[cause] += count
            for key, count in usage.throttled.items():
                existing.throttled[key] += count
            for device, figures in usage.devices.items():
                entry = existing.device(device)
                for index, value in enumerate(figures):
                    entry[index] += value

    async def flush(
        self, conn: AsyncConnection, *, final: bool = False, exported: Any = None
    ) -> int:
        """Upsert finished minutes; `exported(rows)` is called once they are committed (a
        minute Postgres refused alone too: the usage log, not this table, is the bill)."""
        rows = self.take(final=final)
        if not rows:
            return 0
        written: list[tuple[str, int, MinuteUsage]] = []

        async def write(group: list[tuple[str, int, MinuteUsage]]) -> None:
            await _write(conn, group)
            written.extend(group)

        try:
            # Every tenant's minutes share the transaction: when it fails, each (tenant, minute)
            # again alone, so one that Postgres refuses is dropped from the chart (logged,
            # counted); the usage log below, the bill, still gets it.
            await batch_else_each("usage", rows, write)
        except Exception:
            done = {id(row) for row in written}  # (the database went away meanwhile)
            self.restore([row for row in rows if id(row) not in done])
            raise
        if exported is not None:
            exported(rows)
        return len(rows)


async def _write(conn: AsyncConnection, rows: list[tuple[str, int, MinuteUsage]]) -> None:
    """The minutes and their devices' days, in one transaction."""
    params = [
        (
            minute,
            round(u.connection_seconds),
            u.messages_in,
            u.messages_out,
            u.bytes_in,
            u.bytes_out,
            json.dumps(dict(u.dropped)),
            json.dumps(dict(u.throttled)),
            u.retained_count,
            u.stored_bytes,
            u.message_units,
            u.connection_minutes,
            u.storage_byte_hours,
            u.shadow_operations,
            tenant,
        )
        for tenant, minute, u in rows
    ]
    async with conn.transaction():
        async with conn.cursor() as cursor:
            await cursor.executemany(_UPSERT, params)
            devices = device_days(rows)
            if devices:
                await cursor.executemany(_DEVICE_UPSERT, devices)


def device_days(rows: list[tuple[str, int, MinuteUsage]]) -> list[tuple]:
    """The minutes' device figures summed per (tenant, device, UTC day), as upsert parameters."""
    days: dict[tuple[str, str, str], list[int]] = {}
    for tenant, minute, usage in rows:
        day = time.strftime("%Y-%m-%d", time.gmtime(minute))
        for device, figures in usage.devices.items():
            entry = days.setdefault((tenant, device, day), [0, 0, 0])
            for index, value in enumerate(figures):
                entry[index] += value
    return [
        (device, day, units, minutes, shadow, tenant)
        for (tenant, device, day), (units, minutes, shadow) in sorted(days.items())
        if units or minutes or shadow
    ]
