"""The client's requests after CONNACK that change what the broker holds: PUBLISH, SUBSCRIBE,
UNSUBSCRIBE and DISCONNECT. `admission` decides, this applies: it counts what a decision
counts (`accounting`), routes what was accepted, and hands acknowledgements to `Acks`.

What the connection itself must do is returned (`actions`): a DISCONNECT for a PUBLISH that
ends the connection, the UNSUBACK, the client's goodbye. The one reply written here is SUBACK,
which must reach the client before the retained messages its subscriptions bring.
"""

from __future__ import annotations

from typing import Protocol

from common.mqtt.codec import encode
from common.mqtt.packets import (
    MQTT_5_0,
    Properties,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from common.mqtt.packets import Disconnect as DisconnectPacket
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker import admission, refused
from data_plane.broker.accounting import Accounts
from data_plane.broker.acks import Acks, PacketBuilder
from data_plane.broker.actions import Actions, Close, Disconnect, KeepWill, Send
from data_plane.broker.admission import (
    Accept,
    Duplicate,
    Pause,
    PublishAdmission,
    Refuse,
    SubscribeDecision,
)
from data_plane.broker.auth import AuthResult
from data_plane.broker.groups import GroupQueues
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.ports import Commit, Journey, Published, Recipient, SessionStorage
from data_plane.broker.replay import Replays
from data_plane.broker.session import Session


class InboundBroker(Protocol):
    """What the request handlers ask of the broker (`broker.Broker`)."""

    @property
    def accounts(self) -> Accounts: ...
    @property
    def hooks(self) -> Hooks: ...  # `refused` tells them
    @property
    def journey(self) -> Journey | None: ...
    @property
    def persistence(self) -> SessionStorage | None: ...
    @property
    def groups(self) -> GroupQueues: ...  # whether a SUBSCRIBE makes a group too many
    @property
    def replays(self) -> Replays: ...  # what a replay's SUBACK says

    def publish(self, message: Message) -> Published: ...

    def delay(self, message: Message, seconds: int) -> Commit | None: ...

    def quota_exceeded(self, tenant: str, key: str, *, throttled: bool = False) -> None: ...

    def subscribe(
        self, session: Session, sub: Subscription, subscription_id: int | None
    ) -> None: ...

    def unsubscribe(self, session: Session, topic_filter: str) -> bool: ...

    def track_persistent(self, session: Session) -> None: ...


class Gate(Protocol):
    """The connection's read gate (`flow.ReadGate`): reading paused for the broker's sake."""

    def slow_down(self, sessions: tuple[Recipient, ...]) -> None: ...

    def hold_for_rate(self, packet: Publish) -> None: ...


class InboundOutlet(Protocol):
    """What the request handlers need of their connection (after CONNACK: a session and its
    authentication are there); what it must do is returned, not done through it."""

    @property
    def broker(self) -> InboundBroker: ...  # (what `refused` tells the hooks through)
    @property
    def session(self) -> Session: ...
    @property
    def auth(self) -> AuthResult: ...
    @property
    def peer(self) -> str: ...  # who `refused` names
    @property
    def tenant(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def protocol_version(self) -> int: ...

    def send(self, data: bytes) -> None: ...

    def with_reason(self, build: PacketBuilder, reason: str, *, always: bool = False) -> bytes: ...


class Inbound:
    """The requests' handlers; its siblings are given to it, never reached through the
    connection: `admission` decides, `acks` acknowledges, the read `gate` pauses the client."""

    __slots__ = ("conn", "admission", "acks", "gate", "broker")

    def __init__(
        self, conn: InboundOutlet, admission: PublishAdmission, acks: Acks, gate: Gate
    ) -> None:
        self.conn = conn
        self.admission = admission
        self.acks = acks
        self.gate = gate
        self.broker = conn.broker  # the connection's, for good

    def publish(self, packet: Publish) -> Actions:
        conn = self.conn
        decision = self.admission.admit(packet, conn.session.inbound_qos2)
        if type(decision) is not Accept:
            return self._not_accepted(packet, decision)  # type: ignore[arg-type]  # not an Accept (`type() is not` does not narrow)
        broker = self.broker
        message = decision.message
        if decision.service is not None:  # a device shadow request: answered on its topics
            decision.service.request(conn.auth, message)
            if broker.journey is not None:
                broker.journey.served(conn, message, packet.packet_id)
            self.acks.accepted(packet, 0, [])
            return None
        if decision.delay is not None:
            stored = broker.delay(message, decision.delay)
            self.acks.accepted(packet, 0, [stored] if stored is not None else [])
            return None
        published = broker.publish(message)
        journey = broker.journey
        if journey is not None:
            journey.published(message, packet.packet_id, published)
        reached, commits, slow_down, _ = published
        if slow_down:  # subscribers it backed up: read no more of this client until they drain
            self.gate.slow_down(slow_down)
        code = 0 if reached or conn.protocol_version != MQTT_5_0 else RC.NO_MATCHING_SUBSCRIBERS
        self.acks.accepted(packet, code, commits or [])
        return None

    def _not_accepted(
        self, packet: Publish, decision: Duplicate | Refuse | admission.Disconnect | Pause
    ) -> Actions:
        conn = self.conn
        if isinstance(decision, Duplicate):
            self.acks.duplicate(packet)
            return None
        if isinstance(decision, Pause):  # slowed: tried again when the tenant's share wakes it
            self.broker.quota_exceeded(conn.tenant, decision.quota, throttled=True)
            self.gate.hold_for_rate(packet)
            return None
        self.broker.accounts.refused(conn.tenant, decision.quota, decision.counts)
        refused.publish(conn, decision, packet.topic)
        journey = self.broker.journey
        if journey is not None:
            journey.refused(conn, packet, decision)
        if type(decision) is Refuse:
            self.acks.refuse(packet, decision.reason_code, decision.reason)
            return None
        return Disconnect(decision.reason_code, decision.reason, refusal=False)

    def subscribe(self, packet: Subscribe) -> None:
        conn = self.conn
        broker, session, tenant = self.broker, conn.session, conn.tenant
        quota = conn.auth.quota
        decision = admission.admit_subscribe(
            packet,
            conn.auth,
            session.subscriptions,
            lambda shared: broker.groups.over_cap(tenant, quota, shared),
        )
        if decision.denied:
            broker.accounts.denied(tenant, decision.denied)
        for _ in range(decision.quota_hits):
            broker.quota_exceeded(tenant, "subscriptions")
        for _ in range(decision.group_hits):
            broker.quota_exceeded(tenant, "shared_groups")
        if decision.denied or decision.quota_hits or decision.group_hits:
            filters = [sub.topic_filter for sub in packet.subscriptions]
            refused.subscribe(conn, filters, decision.codes)
        notice = broker.replays.notice(tenant, decision.granted)  # a replay's start, if moved
        if notice is None:
            conn.send(encode(SubAck(packet.packet_id, decision.codes), conn.protocol_version))
        else:
            conn.send(conn.with_reason(lambda props: self._suback(packet, decision, props), notice))
        if not conn.auth.service:  # a SUBSCRIBE is billed per 5 KiB of its filters
            size = sum(len(sub.topic_filter) for sub in packet.subscriptions)
            broker.accounts.subscribed(tenant, conn.device, size)
        subscription_id = (packet.properties.get("subscription_identifier") or [None])[0]
        if conn.protocol_version != MQTT_5_0:
            subscription_id = None
        for sub in decision.granted:
            broker.subscribe(session, sub, subscription_id)
        if decision.granted and session.persist is not None and broker.persistence is not None:
            broker.persistence.save_later(session)

    def _suback(
        self, packet: Subscribe, decision: SubscribeDecision, properties: Properties | None
    ) -> bytes:
        suback = SubAck(packet.packet_id, decision.codes, properties or {})
        return encode(suback, self.conn.protocol_version)

    def unsubscribe(self, packet: Unsubscribe) -> Actions:
        conn = self.conn
        broker, session = self.broker, conn.session
        codes = [
            0 if broker.unsubscribe(session, f) else RC.NO_SUBSCRIPTION_EXISTED
            for f in packet.topic_filters
        ]
        if session.persist is not None and broker.persistence is not None:
            broker.persistence.save_later(session)
        return Send(encode(UnsubAck(packet.packet_id, codes), conn.protocol_version))

    def disconnect(self, packet: DisconnectPacket) -> Actions:
        """The client's goodbye: its will goes or not, and the connection closes ("normal")."""
        session = self.conn.session
        if self.conn.protocol_version == MQTT_5_0:
            expiry = packet.properties.get("session_expiry_interval")
            if expiry is not None:
                if session.expiry_interval == 0 and expiry != 0:
                    return Disconnect(RC.PROTOCOL_ERROR, "session expiry was 0 at CONNECT")
                session.expiry_interval = expiry
                self.broker.track_persistent(session)
        # Normal disconnection discards the will; 0x04 asks for it to be sent.
        send_will = packet.reason_code == RC.DISCONNECT_WITH_WILL
        if not send_will:
            session.will = None
        return KeepWill(send_will), Close("normal")
