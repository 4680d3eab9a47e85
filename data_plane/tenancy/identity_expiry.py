"""A client certificate that expires while its device is connected ends the connection at its
notAfter (the earliest of the chain's: device, intermediates, registered CA); a JWT password, at
its `exp` (plus the clock skew it was accepted with).

One timer per connection that has an expiry (`AuthResult.valid_until`), armed on
`client.connected` and cancelled on `client.disconnected`, rather than a periodic sweep: it fires
at the instant, costs nothing for the (many) connections without one, and a sweep would walk every
live connection each second to find the rare expiring one.

The connection ends with DISCONNECT 0x87 Not authorized, as EMQX does when an authenticated
identity's expiry (`expire_at`, e.g. a JWT's `exp`) passes mid-connection; 0xA0 (Maximum connect
time) is a server's limit on how long any connection may last, not a credential ceasing to be
valid. `conn.disconnect` reports it on the `client.refused` hook (kind `forced_disconnect`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection

log = logging.getLogger(__name__)


class IdentityExpiry:
    def __init__(self, broker: Broker) -> None:
        self._timers: dict[int, asyncio.TimerHandle] = {}  # id(connection) -> timer
        broker.hooks.add("client.connected", self._connected)
        broker.hooks.add("client.disconnected", self._disconnected)

    def __len__(self) -> int:
        return len(self._timers)

    def _connected(self, conn: MQTTConnection) -> None:
        valid_until = getattr(conn.auth, "valid_until", None)
        if valid_until is None:
            return
        delay = max(0.0, (valid_until - datetime.now(UTC)).total_seconds())
        self._timers[id(conn)] = asyncio.get_running_loop().call_later(delay, self._expire, conn)

    def _disconnected(self, conn: MQTTConnection) -> None:
        timer = self._timers.pop(id(conn), None)
        if timer is not None:
            timer.cancel()

    def _expire(self, conn: MQTTConnection) -> None:
        self._timers.pop(id(conn), None)
        what = "JWT" if getattr(conn.auth, "identity", "").startswith("jwt:") else "certificate"
        reason = f"{what} expired"
        log.info("%s/%s: %s, connection closed", conn.tenant, conn.device, reason)
        conn.disconnect(ReasonCode.NOT_AUTHORIZED, reason)
