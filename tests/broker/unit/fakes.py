"""What the broker's decision modules are tested through: a real `Broker` in memory (no
sockets, no storage) and a fake connection that records what it was asked to write and do.

The fake stands where `connection.MQTTConnection` stands for each collaborator (the
`HandshakeOutlet`, `InboundOutlet`, `AckOutlet`, `actions.Target`, `ports.Outlet`): it keeps
what they read as plain attributes and applies their actions by recording them."""

from __future__ import annotations

import asyncio
from typing import Any

from common.mqtt.codec import Reader
from common.mqtt.packets import MQTT_5_0
from data_plane.broker import actions
from data_plane.broker.broker import Broker
from data_plane.broker.session import Session
from data_plane.config import BrokerConfig
from data_plane.tenancy.static import StaticAuthenticator

TENANTS = {
    "acme": {
        "devices": {
            "d1": {"password": "pw1", "client_ids": "any"},
            "d2": {"password": "pw2", "client_ids": "any"},
        }
    }
}


def make_broker(**config: Any) -> Broker:
    return Broker(
        BrokerConfig(port=0, ws_port=0, sys_interval=0, **config), StaticAuthenticator(TENANTS)
    )


def told(broker: Broker, name: str) -> list[tuple]:
    """Every call of the hook `name` from now on, as its arguments."""
    calls: list[tuple] = []
    broker.hooks.add(name, lambda *args: calls.append(args))
    return calls


class FakeConnection:
    """A connection as its collaborators see it. `sent`: what was batched for the client;
    `written_now`: what went out at once; `closed`, `disconnected`: how it ended."""

    client_receive_maximum = 65535
    client_maximum_packet_size = 268_435_460
    outbound_bucket = None
    batch_full = False
    write_paused = False
    problem_information = True
    peer_certificate = None

    def __init__(self, broker: Broker, *, version: int = MQTT_5_0, device: str = "d1") -> None:
        self.broker = broker
        self.config = broker.config
        self.loop = asyncio.get_event_loop()
        self.answered: asyncio.Future[None] = self.loop.create_future()
        self.reader = Reader(server_side=True)
        self.protocol_version = version
        self.peer = "127.0.0.1:5555"
        self.transport: Any = None  # a plain socket: no TLS endpoint named
        self.tenant, self.device, self.client_id = "acme", device, f"c-{device}"
        self.auth: Any = None
        self.session: Session | None = None
        self.closing = False
        self.disconnect_reason = ""
        self.sent: list[bytes] = []
        self.written_now: list[bytes] = []
        self.closed = False
        self.disconnected: list[tuple[int, str, str, bool]] = []
        self.send_will: bool | None = None
        self.acks: Any = None
        self.gate: Any = None
        self.admission: Any = None

    # -- what collaborators read ------------------------------------------------------------

    def outbound_alias(self, topic: str) -> None:
        return None

    def alias_sent(self, topic: str, alias: int) -> None: ...

    def pace(self, wait: float) -> None: ...

    def unthrottle_by(self, session: Any) -> None: ...

    def taken_over(self) -> None: ...

    def with_reason(self, build: Any, reason: str, *, always: bool = False) -> bytes:
        return actions_with_reason(self, build, reason, always)

    # -- what actions do ----------------------------------------------------------------------

    def apply(self, decided: actions.Actions) -> None:
        actions.apply(self, decided)

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def write_now(self, data: bytes) -> None:
        self.written_now.append(data)

    def close(self) -> None:
        self.closed = self.closing = True
        if not self.answered.done():
            self.answered.set_result(None)

    def disconnect(
        self, reason_code: int, reason: str = "", *, reference: str = "", refusal: bool = True
    ) -> None:
        self.disconnected.append((reason_code, reason, reference, refusal))
        self.close()

    def will_on_close(self, send: bool) -> None:
        self.send_will = send


def actions_with_reason(conn: FakeConnection, build: Any, reason: str, always: bool) -> bytes:
    from data_plane.broker.acks import with_reason

    return with_reason(
        build,
        reason,
        conn.protocol_version,
        conn.problem_information,
        conn.client_maximum_packet_size,
        always,
    )


def open_session(broker: Broker, conn: FakeConnection, expiry: int = 0) -> Session:
    session, _ = broker.open_session(conn, "acme", conn.client_id, conn.device, True, expiry, 100)
    conn.session = session
    return session
