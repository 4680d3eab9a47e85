"""`inbound.Inbound` through a fake connection: a PUBLISH routed and acknowledged, one that ends
the connection (returned as an action, counted once), the client's goodbye, SUBSCRIBE and
UNSUBSCRIBE."""

from __future__ import annotations

from common.access.acl import AclEntry, AclPolicy
from common.mqtt.codec import Reader
from common.mqtt.packets import (
    MQTT_5_0,
    Disconnect,
    Publish,
    Subscribe,
    Subscription,
    Unsubscribe,
)
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker.acks import Acks
from data_plane.broker.actions import Close, KeepWill, Send
from data_plane.broker.actions import Disconnect as DisconnectAction
from data_plane.broker.admission import PublishAdmission
from data_plane.broker.auth import AuthResult
from data_plane.broker.inbound import Inbound
from data_plane.broker.message import Message
from data_plane.broker.resends import RecentPublishes
from tests.broker.unit.fakes import FakeConnection, make_broker, open_session, told


class Gate:
    def __init__(self) -> None:
        self.slowed: list = []
        self.held: list = []

    def slow_down(self, sessions: tuple) -> None:
        self.slowed.extend(sessions)

    def hold_for_rate(self, packet: Publish) -> None:
        self.held.append(packet)


def _inbound(quota: dict | None = None, device: str = "d1"):
    broker = make_broker()
    conn = FakeConnection(broker, device=device)
    acl = AclPolicy(
        [AclEntry("both", False, "secret/#")], tenant="acme", device=device, default_allow=True
    )
    conn.auth = AuthResult(0, "acme", device, conn.client_id, acl, quota or {})
    open_session(broker, conn)
    admission = PublishAdmission(broker.config, broker.retained)
    admission.begin(conn.auth, MQTT_5_0, conn.client_id, RecentPublishes())
    conn.admission, conn.acks, conn.gate = admission, Acks(conn), Gate()
    return broker, conn, Inbound(conn, admission, conn.acks, conn.gate)


def _packets(data: list[bytes]) -> list:
    reader = Reader(server_side=False, protocol_version=MQTT_5_0)
    return [packet for chunk in data for packet in reader.feed(chunk)]


async def test_a_publish_is_routed_acknowledged_and_billed_returning_nothing_to_do():
    broker, conn, inbound = _inbound()
    subscriber = FakeConnection(broker, device="d2")
    broker.subscribe(open_session(broker, subscriber), Subscription("t/#", 1), None)
    assert inbound.publish(Publish("t/1", b"hello", qos=1, packet_id=7)) is None
    assert len(subscriber.sent) == 1  # delivered
    (puback,) = _packets(conn.sent)
    assert (puback.packet_id, puback.reason_code) == (7, 0)
    stats = broker.stats["acme"]
    assert (stats.messages_received, stats.messages_sent, stats.message_units) == (1, 1, 2)
    assert dict(stats.device_units) == {"d1": 1, "d2": 1}


async def test_a_publish_over_the_size_quota_returns_a_disconnect_and_counts_a_drop():
    broker, conn, inbound = _inbound({"max_message_size": 3})
    refusals = told(broker, "client.refused")
    decided = inbound.publish(Publish("t/1", b"too big", qos=1, packet_id=1))
    assert type(decided) is DisconnectAction and decided.reason_code == RC.PACKET_TOO_LARGE
    assert decided.refusal is False  # told once, as a quota (not again as a forced disconnect)
    assert not conn.disconnected and not conn.sent  # returned, not done
    assert broker.stats["acme"].dropped == 1
    assert broker.stats["acme"].exceeded == {"message_size": 1}
    assert [r[1] for r in refusals] == ["quota_exceeded"]


async def test_the_clients_goodbye_keeps_or_drops_the_will_and_closes_normally():
    broker, conn, inbound = _inbound()
    conn.session.will = Message("will", b"x", 0, False, tenant="acme")
    assert inbound.disconnect(Disconnect(RC.DISCONNECT_WITH_WILL)) == (
        KeepWill(True),
        Close("normal"),
    )
    assert conn.session.will is not None
    assert inbound.disconnect(Disconnect(0)) == (KeepWill(False), Close("normal"))
    assert conn.session.will is None


async def test_a_goodbye_that_sets_an_expiry_the_connect_had_at_zero_is_a_protocol_error():
    _, conn, inbound = _inbound()
    decided = inbound.disconnect(Disconnect(0, {"session_expiry_interval": 60}))
    assert decided == DisconnectAction(RC.PROTOCOL_ERROR, "session expiry was 0 at CONNECT")
    assert not conn.closed


async def test_suback_goes_before_the_retained_message_it_brings_and_is_billed():
    broker, conn, inbound = _inbound()
    broker.publish(Message("r/1", b"kept", 0, True, tenant="acme", publisher="p", device="d2"))
    before = broker.stats["acme"].device_units["d1"]
    packet = Subscribe(3, [Subscription("r/#", 0), Subscription("secret/#", 0)])
    assert inbound.subscribe(packet) is None
    suback, retained = _packets(conn.sent)
    assert suback.packet_id == 3 and suback.reason_codes == [0, RC.NOT_AUTHORIZED]
    assert retained.topic == "r/1" and retained.retain
    assert broker.stats["acme"].denied == 1
    assert broker.stats["acme"].device_units["d1"] > before  # a SUBSCRIBE is billed


async def test_unsubscribe_returns_its_unsuback():
    broker, conn, inbound = _inbound()
    broker.subscribe(conn.session, Subscription("a", 0), None)
    decided = inbound.unsubscribe(Unsubscribe(4, ["a", "b"]))
    assert type(decided) is Send and not conn.sent
    (unsuback,) = _packets([decided.data])
    assert unsuback.reason_codes == [0, RC.NO_SUBSCRIPTION_EXISTED]
    assert conn.session.subscriptions == {}
