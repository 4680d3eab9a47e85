"""The longest Message Expiry Interval MQTT 5 allows (2^32 - 1 s, some 136 years) across two
broker nodes (issue 28, point 6). Before, the forwarding codec held the expiry in a signed
32-bit count of milliseconds (24.8 days at most): such a publish was refused with 0x80 at its
node, never reached the other nodes, a retained one stayed on one node, and a will with it
made the client's CONNECT fail (the node keeps its clients' wills in Redis in the same codec)."""

from __future__ import annotations

import time
import uuid

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.broker.clients import Paho
from tests.cluster.conftest import metric, start_node, until_routed, wait_for

LONGEST = 2**32 - 1  # seconds


def expiring(seconds: int, packet: int = PacketTypes.PUBLISH) -> Properties:
    properties = Properties(packet)
    properties.MessageExpiryInterval = seconds
    return properties


@pytest.fixture(scope="module")
def two(tmp_path_factory, redis_url):
    tmp = tmp_path_factory.mktemp("long-expiry")
    name = f"long-{uuid.uuid4().hex[:6]}"
    nodes = [start_node(tmp, redis_url, name) for _ in range(2)]
    for node in nodes:
        wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 2, 10)
    yield nodes
    for node in nodes:
        node.stop()


def test_a_publish_with_the_longest_expiry_reaches_the_other_node(two):
    a, b = two
    topic = f"long/{uuid.uuid4().hex[:6]}"
    sub = Paho(a.port, "acme/d1", "pw1", "long-sub")
    sub.subscribe(topic, qos=1)
    publisher = Paho(b.port, "acme/d2", "pw2", "long-pub")
    until_routed(publisher, sub, topic)
    info = publisher.client.publish(topic, b"lasting", qos=1, properties=expiring(LONGEST))
    info.wait_for_publish(5)
    assert info.rc == 0 and info.is_published()
    got = sub.expect(1, timeout=5)
    assert [m.payload for m in got] == [b"lasting"]
    # What remains of it, in whole seconds: a moment less than it started with, never more.
    remaining = got[0].properties.MessageExpiryInterval
    assert LONGEST - 5 <= remaining <= LONGEST
    sub.close()
    publisher.close()


def test_a_retained_message_with_the_longest_expiry_is_kept_by_both_nodes(two):
    a, b = two
    topic = f"long-kept/{uuid.uuid4().hex[:6]}"
    publisher = Paho(b.port, "acme/d3", "pw3", "kept-pub")
    info = publisher.client.publish(
        topic, b"kept", qos=1, retain=True, properties=expiring(LONGEST)
    )
    info.wait_for_publish(5)
    publisher.close()
    for node, client_id in ((a, "kept-a"), (b, "kept-b")):
        # The other node hears of it through the cluster's stream, a moment after the publishing
        # node acknowledged it (under a loaded CI once after the subscription came): a new
        # subscription asks again until it is there, or 10 s have passed (a lost one fails).
        deadline = time.monotonic() + 10
        while True:
            sub = Paho(node.port, "acme/d4", "pw4", client_id)
            sub.subscribe(topic, qos=1)
            got = sub.expect(1, timeout=1)
            sub.close()
            if got or time.monotonic() > deadline:
                break
        assert [(m.payload, m.retain) for m in got] == [(b"kept", True)], client_id
        assert got[0].properties.MessageExpiryInterval >= LONGEST - 5


def test_a_will_with_the_longest_expiry_neither_breaks_connecting_nor_is_lost(two):
    a, b = two
    topic = f"long-will/{uuid.uuid4().hex[:6]}"
    watcher = Paho(a.port, "acme/d5", "pw5", "will-watch")
    watcher.subscribe(topic, qos=1)
    will = (topic, b"gone", 1, False, expiring(LONGEST, PacketTypes.WILLMESSAGE))
    device = Paho(b.port, "acme/d6", "pw6", "will-device", will=will)
    assert device.reason_code == 0
    until_routed(device, watcher, topic)
    device.close(abrupt=True)  # the will goes out, to the other node's subscriber
    got = watcher.expect(1, timeout=5)
    assert [m.payload for m in got] == [b"gone"]
    # The same client id connects again, and again, with the same will.
    for _ in range(2):
        again = Paho(b.port, "acme/d6", "pw6", "will-device", will=will)
        assert again.reason_code == 0
        again.close()
    watcher.close()
