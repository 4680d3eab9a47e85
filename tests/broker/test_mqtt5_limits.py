"""MQTT 5.0 limits and hooks: packet sizes both ways, receive maximum, topic aliases to the
client, enhanced authentication, shared-subscription hand-over, and the hook points."""

import asyncio
import socket
import time

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from data_plane.broker.limits import PUBLISH_OVERHEAD
from data_plane.config import BrokerConfig
from data_plane.server import serve
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.clients import Paho
from tests.broker.conftest import TENANTS, start_broker
from tests.broker.test_interop import _closed, _raw_client
from tests.mqtt_bytes import string, varint


def test_inbound_packet_over_the_maximum_is_refused(broker):
    sock = _raw_client(broker, "too-big", version=5)
    body = string("big") + b"\x00" + b"x" * (1_048_576 + 10)
    sock.sendall(b"\x30" + varint(len(body)) + body[:1000])  # the header alone is enough
    sent = _closed(sock)
    assert sent[:1] == b"\xe0" and sent[2] == 0x95
    sock.close()


def test_deliveries_over_the_clients_maximum_are_skipped(broker):
    props = {"MaximumPacketSize": 200}
    small = Paho(broker.port, "acme/d1", "pw1", "small-max", properties=props)
    small.subscribe("size/#", 0)
    pub = Paho(broker.port, "acme/d2", "pw2", "size-pub")
    pub.publish("size/t", b"x" * 500, 1)
    pub.publish("size/t", b"ok", 1)
    assert [m.payload for m in small.expect(2, 1.5)] == [b"ok"]
    small.close(), pub.close()


def test_topic_aliases_towards_the_client(broker):
    aliased = Paho(broker.port, "acme/d1", "pw1", "alias-out", properties={"TopicAliasMaximum": 5})
    aliased.subscribe("ta/#", 0)
    pub = Paho(broker.port, "acme/d2", "pw2", "alias-out-pub")
    for i in range(3):
        pub.publish("ta/long/topic/name", f"m{i}", 1)
    got = aliased.expect(3)
    # On the wire (paho does not resolve aliases itself): the topic once, then the alias alone.
    assert [(m.topic, m.properties.TopicAlias, m.payload) for m in got] == [
        ("ta/long/topic/name", 1, b"m0"),
        ("", 1, b"m1"),
        ("", 1, b"m2"),
    ]
    aliased.close(), pub.close()


def test_a_delivery_too_large_for_the_client_leaves_no_topic_alias_behind(broker):
    """The first delivery on a topic is over the client's Maximum Packet Size (skipped): the
    next one on that topic must carry the topic itself, since the client never saw the alias
    (an alias alone that the client does not know is a protocol error, MQTT 5.0 §3.3.2.3.4)."""
    props = {"TopicAliasMaximum": 5, "MaximumPacketSize": 200}
    aliased = Paho(broker.port, "acme/d1", "pw1", "alias-big", properties=props)
    aliased.subscribe("tb/#", 0)
    pub = Paho(broker.port, "acme/d2", "pw2", "alias-big-pub")
    pub.publish("tb/long/topic/name", b"x" * 500, 1)
    pub.publish("tb/long/topic/name", b"m1", 1)
    pub.publish("tb/long/topic/name", b"m2", 1)
    got = aliased.expect(3, 1.5)
    assert [(m.topic, m.properties.TopicAlias, m.payload) for m in got] == [
        ("tb/long/topic/name", 1, b"m1"),
        ("", 1, b"m2"),
    ]
    aliased.close(), pub.close()


def test_broker_respects_the_clients_receive_maximum(broker):
    # A raw 5.0 client with Receive Maximum 2 that never acknowledges.
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    props = b"\x21\x00\x02"  # receive_maximum = 2
    body = string("MQTT") + bytes((5, 0xC2)) + (60).to_bytes(2, "big") + varint(len(props)) + props
    body += string("recv-max") + string("acme/d1") + string("pw1")
    sock.sendall(b"\x10" + varint(len(body)) + body)
    assert sock.recv(64)[:1] == b"\x20"
    sub = string("rm/t") + b"\x01"
    sock.sendall(b"\x82" + varint(3 + len(sub)) + b"\x00\x01\x00" + sub)
    time.sleep(0.3)
    sock.recv(64)  # SUBACK
    pub = Paho(broker.port, "acme/d2", "pw2", "rm-pub")
    for i in range(5):
        pub.publish("rm/t", f"m{i}", 1)
    time.sleep(0.5)
    sock.settimeout(0.5)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pass
    assert data.count(b"rm/t") == 2  # only two unacknowledged QoS 1 messages in flight
    sock.close()
    pub.close()


def test_unsupported_authentication_method_gets_0x8c(broker):
    client = Paho(
        broker.port,
        "acme/d1",
        "pw1",
        "enh-auth",
        properties={"AuthenticationMethod": "SCRAM-SHA-1"},
    )
    assert client.reason_code.value == 0x8C
    client.close()


def test_shared_member_leaving_hands_unacked_messages_on(broker):
    stingy = Paho(broker.port, "acme/d1", "pw1", "share-stingy")
    stingy.client.on_message = lambda *a: None
    stingy.client.manual_ack_set(True)  # paho: never send PUBACK
    stingy.subscribe("$share/h/ho/#", 1)
    pub = Paho(broker.port, "acme/d2", "pw2", "share-pub2")
    for i in range(4):
        pub.publish("ho/t", f"h{i}", 1)
    time.sleep(0.3)
    other = Paho(broker.port, "acme/d3", "pw3", "share-other")
    other.subscribe("$share/h/ho/#", 1)
    stingy.close(abrupt=True)  # leaves with everything unacknowledged
    got = sorted(m.payload.decode() for m in other.expect(4, 3))
    assert got == ["h0", "h1", "h2", "h3"]
    other.close(), pub.close()


async def test_hooks_observe_change_and_drop_messages():
    config = BrokerConfig(port=0, ws_port=0, sys_interval=0)
    server = await serve(config, StaticAuthenticator(TENANTS))
    events = []
    hooks = server.broker.hooks

    def censor(message):
        if message.topic == "drop/me":
            return None
        message.payload = message.payload.upper()
        return message

    hooks.add("message.publish", censor, priority=10)
    hooks.add("client.connected", lambda conn: events.append(("connected", conn.client_id)))
    hooks.add("session.subscribed", lambda s, sub: events.append(("subscribed", sub.topic_filter)))
    hooks.add("message.delivered", lambda s, d: events.append(("delivered", d.message.topic)))
    hooks.add("message.acked", lambda s, d: events.append(("acked", d.message.topic)))
    hooks.add("client.disconnected", lambda conn: events.append(("disconnected", conn.client_id)))
    port = server.listeners["mqtt"][1]
    try:
        import aiomqtt

        async with aiomqtt.Client(
            "127.0.0.1", port, username="acme/d1", password="pw1", identifier="hooked"
        ) as client:
            await client.subscribe("#", qos=1)
            await client.publish("drop/me", b"secret", qos=1)
            await client.publish("keep/me", b"quiet", qos=1)
            async with asyncio.timeout(5):
                async for message in client.messages:
                    assert (str(message.topic), message.payload) == ("keep/me", b"QUIET")
                    break
            await asyncio.sleep(0.2)
    finally:
        await server.shutdown()
    assert ("connected", "hooked") in events and ("subscribed", "#") in events
    assert ("delivered", "keep/me") in events and ("acked", "keep/me") in events
    assert ("disconnected", "hooked") in events
    assert not any(name == "delivered" and topic == "drop/me" for name, topic in events)


KIB = 1024
PLAN_TENANTS = {
    **TENANTS,
    # A plan's limit well under the broker's own 1 MiB, and one over it.
    "small": {"quota": {"max_message_size": 256 * KIB}, "devices": TENANTS["acme"]["devices"]},
    "huge": {"quota": {"max_message_size": 8192 * KIB}, "devices": TENANTS["acme"]["devices"]},
}


def test_connack_maximum_packet_size_is_the_tenants_message_size(tmp_path):
    broker = start_broker(tmp_path, tenants=PLAN_TENANTS)
    try:
        advertised = {}
        for tenant in ("small", "huge", "acme"):
            client = Paho(broker.port, f"{tenant}/d1", "pw1", f"{tenant}-max")
            advertised[tenant] = client.connack_properties.MaximumPacketSize
            client.close()
        # The plan's 256 KiB plus a publish's overhead (limits.PUBLISH_OVERHEAD: the longest
        # topic and 64 KiB of properties), so that a client refuses a 1 MiB publish itself
        # instead of being disconnected for it and sending it again at every reconnect.
        assert advertised["small"] == 256 * KIB + PUBLISH_OVERHEAD < 1_048_576
        # Never more than the broker reads; a tenant without a limit gets the broker's.
        assert advertised["huge"] == advertised["acme"] == 1_048_576

        # The bound holds for the largest publish the plan allows: a payload at the limit on the
        # longest topic MQTT allows, with properties, fits the advertised size and is delivered.
        watcher = Paho(broker.port, "small/d1", "pw1", "small-watch")
        watcher.subscribe("#", 1)
        publisher = Paho(broker.port, "small/d2", "pw2", "small-pub")
        topic = "t/" + "x" * (65_535 - 2)
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("k", "v" * 30_000)]
        props.ContentType = "c" * 30_000
        payload = b"p" * (256 * KIB)
        packet = publisher.publish(topic, payload, 1, properties=props)
        assert packet.is_published()
        (got,) = watcher.expect(1, 5)
        assert got.topic == topic and got.payload == payload
        # One byte more is the broker's to refuse: its payload is over the plan's limit.
        publisher.publish(topic, payload + b"p", 1, properties=props)
        assert publisher.disconnected.wait(5) and publisher.disconnect_reason.value == 0x95
        watcher.close(), publisher.stop_loop()
    finally:
        broker.stop()
