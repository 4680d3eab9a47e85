"""QoS acknowledgements, both ways, never ahead of what they promise.

Inbound (the client's PUBLISH): PUBACK/PUBREC go out once every durable copy of the message is
committed (group commit); a refused commit is a negative acknowledgement on 5.0 and a closed
connection on 3.1.1 (the client resends). A QoS 2 packet id is held until PUBREL, committed with
the message for a persistent session, and released in the database before PUBCOMP.

Outbound (our deliveries): the client's PUBACK/PUBREC/PUBCOMP settle the session's inflight
window; PUBREL goes out once the client's PUBREC is committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from common.mqtt.codec import encode_ack, encode_puback
from common.mqtt.packets import (
    MQTT_5_0,
    PacketType,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker.accounting import Accounts
from data_plane.broker.hooks import Hooks
from data_plane.broker.ports import Commit, WriteRefused
from data_plane.broker.resends import RecentPublishes
from data_plane.broker.session import Delivery, Session

log = logging.getLogger(__name__)


# Builds a packet given its properties (None: none beyond its own), so that a Reason String
# can be added where the client may take one (`with_reason`).
PacketBuilder = Callable[[Properties | None], bytes]


def with_reason(
    build: PacketBuilder,
    reason: str,
    version: int,
    problem_information: bool,
    max_size: int,
    always: bool = False,
) -> bytes:
    """`build(properties)` with a Reason String where the client may receive one: not after
    Request Problem Information 0, except on CONNACK/DISCONNECT (`always`) [MQTT-3.1.2-32],
    and never growing the packet past the client's Maximum Packet Size [MQTT-3.1.2-27]
    [MQTT-3.2.2-19] [MQTT-3.4.2-2] [MQTT-3.5.2-2] [MQTT-3.14.2-3]."""
    if not reason or version != MQTT_5_0:
        return build(None)
    if not (always or problem_information):
        return build(None)
    data = build({"reason_string": reason})
    return data if len(data) <= max_size else build(None)


class AckBroker(Protocol):
    """What acknowledgements ask of the broker (`broker.Broker`)."""

    @property
    def accounts(self) -> Accounts: ...
    @property
    def hooks(self) -> Hooks: ...

    def settled(self, session: Session, delivery: Delivery) -> None: ...


class Remembers(Protocol):
    """The connection's admission: its `recent` QoS 1 publishes."""

    @property
    def recent(self) -> RecentPublishes: ...


class AckOutlet(Protocol):
    """What acknowledgements need of their connection (after CONNACK: it has a session)."""

    @property
    def broker(self) -> AckBroker: ...
    @property
    def session(self) -> Session: ...
    @property
    def tenant(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def protocol_version(self) -> int: ...
    @property
    def closing(self) -> bool: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def admission(
        self,
    ) -> Remembers: ...  # its `recent` publishes: one whose commit failed is forgotten

    def send(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def with_reason(self, build: PacketBuilder, reason: str, *, always: bool = False) -> bytes: ...


class Acks:
    __slots__ = ("conn",)

    def __init__(self, conn: AckOutlet) -> None:
        self.conn = conn

    # -- the client's PUBLISH ---------------------------------------------------------------

    def accepted(self, packet: Publish, code: int, commits: list[Commit]) -> None:
        """A PUBLISH routed (or scheduled): acknowledge it now, or once `commits` are durable."""
        qos = packet.qos
        if qos == 0:
            return
        if qos == 2:
            self.hold_qos2(packet.packet_id, commits)  # type: ignore[arg-type]  # QoS 1/2: it has an id (codec)
        if commits:
            # Acknowledge only once every durable copy is committed (group commit).
            self.conn.loop.create_task(self._ack_after_commit(packet, code, commits))
        elif qos == 1 and not code:  # the common case: `encode_ack`'s 4 bytes, either version
            self.conn.send(encode_puback(packet.packet_id))  # QoS 1: it has an id (codec)
        else:
            self.ack_publish(packet, code)

    def refuse(self, packet: Publish, code: int, reason: str) -> None:
        """5.0: negative acknowledgement; 3.1.1 has none, so acknowledge and drop (allowed)."""
        conn = self.conn
        conn.broker.accounts.dropped(conn.tenant)
        if packet.qos == 0:
            return
        self.ack_publish(packet, code if conn.protocol_version == MQTT_5_0 else 0, reason)

    def duplicate(self, packet: Publish) -> None:
        """A resent PUBLISH we already took: acknowledge again, don't deliver twice."""
        kind = PacketType.PUBACK if packet.qos == 1 else PacketType.PUBREC
        self.send_ack(kind, packet.packet_id)  # type: ignore[arg-type]  # QoS 1/2: it has an id (codec)

    def hold_qos2(self, packet_id: int, commits: list[Commit]) -> None:
        """Remember a QoS 2 packet id until PUBREL; a persistent session commits it with the
        message's durable copies, so a resend after a crash is recognised."""
        session = self.conn.session
        session.inbound_qos2.add(packet_id)
        if session.durable is not None:
            commits.append(session.durable.inbound_qos2(session, packet_id, True))

    def ack_publish(self, packet: Publish, code: int, reason: str = "") -> None:
        conn = self.conn
        kind = PacketType.PUBACK if packet.qos == 1 else PacketType.PUBREC
        if not reason:  # once per QoS 1/2 PUBLISH: no closure, no property decisions
            conn.send(encode_ack(kind, packet.packet_id, code, None, conn.protocol_version))  # type: ignore[arg-type]  # QoS 1/2: it has an id (codec)
            return
        conn.send(
            conn.with_reason(
                lambda props: encode_ack(
                    kind,
                    packet.packet_id,  # type: ignore[arg-type]  # QoS 1/2: it has an id (codec)
                    code,
                    props,
                    conn.protocol_version,
                ),
                reason,
            )
        )

    async def _ack_after_commit(self, packet: Publish, code: int, commits: list[Commit]) -> None:
        conn = self.conn
        results = await asyncio.gather(*commits, return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None and packet.qos == 1:  # not kept after all: a resend is new
            conn.admission.recent.forget(packet.packet_id)  # type: ignore[arg-type]  # QoS 1/2: it has an id (codec)
        if conn.closing:
            return
        if failure is None:
            self.ack_publish(packet, code)
        elif conn.protocol_version == MQTT_5_0:
            if packet.qos == 2:
                conn.session.inbound_qos2.discard(packet.packet_id)
            why = "refused" if isinstance(failure, WriteRefused) else "unavailable"
            self.ack_publish(packet, RC.UNSPECIFIED_ERROR, f"persistent storage {why}")
        else:
            conn.close()  # 3.1.1 cannot say it: no PUBACK, the client will resend

    def pubrel(self, packet: PubRel) -> None:
        """The client releases a QoS 2 packet id: PUBCOMP, after the release is durable."""
        conn = self.conn
        session = conn.session
        known = packet.packet_id in session.inbound_qos2
        session.inbound_qos2.discard(packet.packet_id)
        if known and session.durable is not None:
            # Released in the database before PUBCOMP: the client may reuse the id after.
            commit = session.durable.inbound_qos2(session, packet.packet_id, False)
            conn.loop.create_task(self._after_commit(commit, PacketType.PUBCOMP, packet))
        else:
            code = 0 if known else RC.PACKET_IDENTIFIER_NOT_FOUND
            self.send_ack(PacketType.PUBCOMP, packet.packet_id, code)

    # -- the client's acknowledgements of our deliveries ----------------------------------------

    def puback(self, packet: PubAck) -> None:
        conn = self.conn  # `_settled` inlined: once per QoS 1 delivery
        delivery = conn.session.puback(packet.packet_id)
        if delivery is not None:
            conn.broker.settled(conn.session, delivery)
            conn.broker.hooks.run("message.acked", conn.session, delivery)

    def pubcomp(self, packet: PubComp) -> None:
        self._settled(self.conn.session.pubcomp(packet.packet_id))

    def _settled(self, delivery: Delivery | None) -> None:
        if delivery is not None:
            conn = self.conn
            conn.broker.settled(conn.session, delivery)
            conn.broker.hooks.run("message.acked", conn.session, delivery)

    def pubrec(self, packet: PubRec) -> None:
        conn = self.conn
        session = conn.session
        failed = packet.reason_code >= RC.UNSPECIFIED_ERROR
        delivery = session.pubrec(packet.packet_id, failed)
        if delivery is not None:
            if failed:
                conn.broker.settled(session, delivery)
            elif delivery.seq is not None and session.durable is not None:
                commit = session.durable.released(session, delivery, packet.packet_id)
                conn.loop.create_task(self._after_commit(commit, PacketType.PUBREL, packet))
            else:
                self.send_ack(PacketType.PUBREL, packet.packet_id)
        elif not failed:
            self.send_ack(PacketType.PUBREL, packet.packet_id, RC.PACKET_IDENTIFIER_NOT_FOUND)

    # -- both ---------------------------------------------------------------------------------

    def send_ack(self, kind: PacketType, packet_id: int, code: int = 0) -> None:
        self.conn.send(encode_ack(kind, packet_id, code, None, self.conn.protocol_version))

    async def _after_commit(
        self, commit: Commit, kind: PacketType, packet: PubRec | PubRel
    ) -> None:
        """PUBREL/PUBCOMP once the QoS 2 state change is durable; if the database refused it,
        close: the client resends after reconnecting and nothing is delivered twice."""
        conn = self.conn
        try:
            await commit
        except Exception as exc:
            log.warning("QoS 2 state not stored (%s); closing %s", exc, conn.client_id)
            if not conn.closing:
                conn.close()
            return
        if not conn.closing:
            self.send_ack(kind, packet.packet_id)
