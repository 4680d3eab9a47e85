"""Two secrets per device without downtime: each live connection is tied to the secret that
authenticated it, and ends when that secret does (expired at the end of a rotation's grace
period, or revoked), while connections on the other secret stay up.

Decisions only: `expiry_of` and `doomed` say what to do; `CredentialWatch` keeps one timer per
connection (on the broker's loop) and asks the directory again when a timer fires or the control
plane announces a credential change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.tenancy.directory import TenantDirectory
from data_plane.tenancy.store import CredentialRecord, DeviceRecord

log = logging.getLogger(__name__)
ADMINISTRATIVE_ACTION = 0x98


def live_credentials(record: DeviceRecord | None, now: datetime) -> dict[int, CredentialRecord]:
    """The device's credentials still accepted at `now`, by id."""
    if record is None or record.device_id is None or not record.enabled:
        return {}
    return {c.id: c for c in record.credentials if c.expires_at is None or c.expires_at > now}


def doomed(
    connections: Iterable[MQTTConnection], live: dict[int, CredentialRecord]
) -> list[MQTTConnection]:
    """The connections whose secret is no longer accepted (those without a known credential,
    e.g. service identities, are not judged here)."""
    return [
        c
        for c in connections
        if (cid := getattr(c.auth, "credential_id", None)) is not None and cid not in live
    ]


class CredentialWatch:
    def __init__(self, broker: Broker, directory: TenantDirectory) -> None:
        self.broker = broker
        self.directory = directory
        self._timers: dict[int, asyncio.TimerHandle] = {}  # id(connection) -> timer
        broker.hooks.add("client.connected", self._connected)
        broker.hooks.add("client.disconnected", self._disconnected)

    def _device_connections(self, tenant: str, device: str) -> list[MQTTConnection]:
        return [
            c
            for c in list(getattr(self.broker, "connections", ()))
            if c.tenant == tenant and c.device == device and c.auth is not None
        ]

    def _connected(self, conn: MQTTConnection) -> None:
        self._arm(conn, getattr(conn.auth, "credential_expires_at", None))

    def _disconnected(self, conn: MQTTConnection) -> None:
        timer = self._timers.pop(id(conn), None)
        if timer is not None:
            timer.cancel()

    def _arm(self, conn: MQTTConnection, expires_at: datetime | None) -> None:
        """(Re)set the connection's timer to its secret's expiry."""
        self._disconnected(conn)
        if expires_at is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (expires_at - datetime.now(UTC)).total_seconds())
        self._timers[id(conn)] = loop.call_later(
            delay, lambda: loop.create_task(self.recheck(conn.tenant, conn.device))
        )

    async def recheck(self, tenant: str, device: str) -> int:
        """Drop the device's connections whose secret is gone; re-arm the others' timers.
        Returns how many were dropped."""
        connections = self._device_connections(tenant, device)
        if not connections:
            return 0
        self.directory.forget_device(tenant, device)
        try:
            record = await self.directory.device(tenant, device)
        except Exception as exc:  # the database is away: judge again at the next change
            log.warning("credential check of %s/%s failed: %s", tenant, device, exc)
            return 0
        live = live_credentials(record, datetime.now(UTC))
        ending = doomed(connections, live)
        for conn in ending:
            conn.disconnect(ADMINISTRATIVE_ACTION, "secret expired or revoked")
        for conn in connections:
            if conn not in ending:
                credential = live.get(getattr(conn.auth, "credential_id", None))
                if credential is not None:
                    conn.auth.credential_expires_at = credential.expires_at  # type: ignore[union-attr]  # _device_connections: all have auth
                    self._arm(conn, credential.expires_at)
        if ending:
            log.info(
                "%s/%s: closed %d connection(s) on an expired or revoked secret",
                tenant,
                device,
                len(ending),
            )
        return len(ending)
