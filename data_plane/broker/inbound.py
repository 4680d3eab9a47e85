"""The client's requests after CONNACK that change what the broker holds: PUBLISH, SUBSCRIBE,
UNSUBSCRIBE and DISCONNECT. `admission` decides, this applies: it counts what a decision
counts, routes what was accepted, and hands acknowledgements to `Acks`.
"""

from __future__ import annotations

from typing import Any, Protocol

from common.mqtt.codec import encode
from common.mqtt.packets import (
    MQTT_5_0,
    Disconnect,
    Publish,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker import admission, refused
from data_plane.broker.acks import Acks
from data_plane.broker.admission import Accept, Duplicate, Pause, PublishAdmission, Refuse


class InboundOutlet(Protocol):
    """What the request handlers need of their connection."""

    broker: Any
    session: Any
    auth: Any
    tenant: str
    client_id: str
    protocol_version: int
    disconnect_reason: str
    acks: Acks
    gate: Any

    def send(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def disconnect(
        self, reason_code: int, reason: str = "", *, reference: str = "", refusal: bool = True
    ) -> None: ...

    def will_on_close(self, send: bool) -> None: ...


class Inbound:
    __slots__ = ("conn", "admission")

    def __init__(self, conn: InboundOutlet, admission: PublishAdmission) -> None:
        self.conn = conn
        self.admission = admission

    def publish(self, packet: Publish) -> None:
        conn = self.conn
        decision = self.admission.admit(packet, conn.session.inbound_qos2)
        if type(decision) is not Accept:
            self._not_accepted(packet, decision)
            return
        broker = conn.broker
        message = decision.message
        if decision.service is not None:  # a device shadow request: answered on its topics
            decision.service.request(conn.auth, message)
            if broker.journey is not None:
                broker.journey.served(conn, message, packet.packet_id)
            conn.acks.accepted(packet, 0, [])
            return
        if decision.delay is not None:
            stored = broker.delay(message, decision.delay)
            conn.acks.accepted(packet, 0, [stored] if stored is not None else [])
            return
        published = broker.publish(message)
        journey = broker.journey
        if journey is not None:
            journey.published(message, packet.packet_id, published)
        reached, commits, slow_down, _ = published
        if slow_down:  # subscribers it backed up: read no more of this client until they drain
            conn.gate.slow_down(slow_down)
        code = 0 if reached or conn.protocol_version != MQTT_5_0 else RC.NO_MATCHING_SUBSCRIBERS
        conn.acks.accepted(packet, code, commits or [])

    def _not_accepted(self, packet: Publish, decision: Any) -> None:
        conn = self.conn
        if type(decision) is Duplicate:
            conn.acks.duplicate(packet)
            return
        if type(decision) is Pause:  # slowed: tried again when the tenant's share wakes it
            conn.broker.quota_exceeded(conn.tenant, decision.quota, throttled=True)
            conn.gate.hold_for_rate(packet)
            return
        conn.broker.accounts.refused(conn.tenant, decision.quota, decision.counts)
        refused.publish(conn, decision, packet.topic)
        if conn.broker.journey is not None:
            conn.broker.journey.refused(conn, packet, decision)
        if type(decision) is Refuse:
            conn.acks.refuse(packet, decision.reason_code, decision.reason)
        else:
            conn.disconnect(decision.reason_code, decision.reason, refusal=False)

    def subscribe(self, packet: Subscribe) -> None:
        conn = self.conn
        broker, session, tenant = conn.broker, conn.session, conn.tenant
        decision = admission.admit_subscribe(packet, conn.auth, session.subscriptions)
        if decision.denied:
            broker.accounts.denied(tenant, decision.denied)
        for _ in range(decision.quota_hits):
            broker.quota_exceeded(tenant, "subscriptions")
        if decision.denied or decision.quota_hits:
            filters = [sub.topic_filter for sub in packet.subscriptions]
            refused.subscribe(conn, filters, decision.codes)
        conn.send(encode(SubAck(packet.packet_id, decision.codes), conn.protocol_version))
        if not conn.auth.service:  # a SUBSCRIBE is billed per 5 KiB of its filters
            size = sum(len(sub.topic_filter) for sub in packet.subscriptions)
            broker.accounts.subscribed(tenant, conn.device, size)
        subscription_id = (packet.properties.get("subscription_identifier") or [None])[0]
        if conn.protocol_version != MQTT_5_0:
            subscription_id = None
        for sub in decision.granted:
            broker.subscribe(session, sub, subscription_id)
        if decision.granted and session.persist is not None:
            broker.persistence.save_later(session)

    def unsubscribe(self, packet: Unsubscribe) -> None:
        conn = self.conn
        broker, session = conn.broker, conn.session
        codes = [
            0 if broker.unsubscribe(session, f) else RC.NO_SUBSCRIPTION_EXISTED
            for f in packet.topic_filters
        ]
        conn.send(encode(UnsubAck(packet.packet_id, codes), conn.protocol_version))
        if session.persist is not None:
            broker.persistence.save_later(session)

    def disconnect(self, packet: Disconnect) -> None:
        conn = self.conn
        session = conn.session
        if conn.protocol_version == MQTT_5_0:
            expiry = packet.properties.get("session_expiry_interval")
            if expiry is not None:
                if session.expiry_interval == 0 and expiry != 0:
                    conn.disconnect(RC.PROTOCOL_ERROR, "session expiry was 0 at CONNECT")
                    return
                session.expiry_interval = expiry
                conn.broker.track_persistent(session)
        # Normal disconnection discards the will; 0x04 asks for it to be sent.
        send_will = packet.reason_code == RC.DISCONNECT_WITH_WILL
        conn.will_on_close(send_will)
        conn.disconnect_reason = "normal"
        if not send_will:
            session.will = None
        conn.close()
