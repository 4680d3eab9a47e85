"""MQTT 3.1.1: the behaviours of the Eclipse Paho interoperability suite
(eclipse/paho.mqtt.testing, interoperability/client_test.py), checked with the real paho-mqtt
client against our broker. Each test names the Paho test it mirrors and the normative statements
of the OASIS MQTT 3.1.1 specification it rests on; where the Paho test tolerates a choice the
specification leaves open, so do we, and where the specification says MUST we assert it.

Topics are the suite's (TopicA, TopicA/B, Topic/C, TopicA/C, /TopicA and its wildcards) under a
per-test prefix, as client_test5.py does with "client_test5/", so one module broker serves all.
"""

from __future__ import annotations

import time

from tests.conformance.paho_helpers import (
    TOPICS,
    Raw,
    connect_packet,
    paho_fixtures,
)

broker, prefix, topics, wildtopics, client = paho_fixtures(v5=False)


def test_basic(broker, client, topics):
    """Paho `testBasic`: connect, disconnect, connect again (session present 0), subscribe at
    QoS 2 and get back our own QoS 0, 1 and 2 publications, in order and at their QoS; a second
    CONNECT on one connection, and a CONNECT with the protocol name "hj", are refused by closing.
    [MQTT-3.2.2-1] clean session 1 -> session present 0; [MQTT-3.8.4-1] SUBACK;
    [MQTT-3.3.5-1]/[MQTT-3.8.4-6] delivery at min(publish QoS, granted QoS); [MQTT-4.6.0-6]
    topics are ordered; [MQTT-3.1.0-2] a second CONNECT is a protocol violation: disconnect;
    [MQTT-3.1.2-1] an unknown protocol name: the server MAY disconnect and MUST NOT go on under
    this specification (no accepting CONNACK)."""
    a = client()
    a.connect()
    a.disconnect()
    connack = a.connect()
    assert connack.session_present is False
    assert a.subscribe(topics[0], 2) == [2]
    a.publish(topics[0], b"qos 0", 0)
    a.publish(topics[0], b"qos 1", 1)
    a.publish(topics[0], b"qos 2", 2)
    got = a.expect(3)
    a.disconnect()
    assert [(m.payload, m.qos) for m in got] == [(b"qos 0", 0), (b"qos 1", 1), (b"qos 2", 2)]

    raw = Raw(broker.port)
    raw.send(connect_packet(f"{topics[0]}-raw"))
    connack_packet = raw.read()
    assert connack_packet.kind == 2 and connack_packet.body[1] == 0
    raw.send(connect_packet(f"{topics[0]}-raw"))
    assert raw.closed_by_broker(), "second CONNECT did not close the connection"
    raw.close()

    raw = Raw(broker.port)
    raw.send(connect_packet(f"{topics[0]}-hj", protocol_name="hj"))
    reply = raw.read()
    assert reply is None or (reply.kind == 2 and reply.body[1] != 0), reply
    assert reply is None or raw.closed_by_broker()
    raw.close()


def test_retained_messages(client, topics, wildtopics):
    """Paho `test_retained_messages`: retained QoS 0, 1 and 2 publications reach a later
    subscriber to `+/+`, flagged retained; after zero-byte retained publications to the same
    topics a new subscriber gets nothing.
    [MQTT-3.3.1-5] the server MUST store a retained message; [MQTT-3.3.1-6] and deliver it to new
    matching subscriptions; [MQTT-3.3.1-8] with RETAIN 1 when sent for a new subscription;
    [MQTT-3.3.1-10] a zero-byte retained message removes the retained message;
    [MQTT-3.3.1-11] and is not itself stored."""
    a = client()
    assert a.connect().session_present is False
    a.publish(topics[1], b"qos 0", 0, retain=True)
    a.publish(topics[2], b"qos 1", 1, retain=True)
    a.publish(topics[3], b"qos 2", 2, retain=True)
    a.subscribe(wildtopics[5], 2)
    got = a.expect(3)
    assert sorted((m.topic, m.payload, m.qos) for m in got) == sorted(
        [(topics[1], b"qos 0", 0), (topics[2], b"qos 1", 1), (topics[3], b"qos 2", 2)]
    )
    assert all(m.retain for m in got)
    assert a.drain() == []
    a.disconnect()

    assert a.connect().session_present is False
    a.publish(topics[1], b"", 0, retain=True)
    a.publish(topics[2], b"", 1, retain=True)
    a.publish(topics[3], b"", 2, retain=True)
    a.subscribe(wildtopics[5], 2)
    leftovers = a.drain(0.5)
    a.disconnect()
    assert leftovers == [], [(m.topic, m.payload) for m in leftovers]


def test_will_message(client, topics):
    """Paho `will_message_test`: a client with a will whose network connection just goes
    (`terminate()`) has its will published to a subscriber, once. Beyond Paho: a client that
    sends DISCONNECT first has no will published.
    [MQTT-3.1.2-8] the will MUST be published when the network connection is closed without
    DISCONNECT; [MQTT-3.1.2-10] it MUST be removed on receipt of DISCONNECT."""
    b = client("myclientid2")
    b.connect(clean=False)
    b.subscribe(topics[2], 2)
    a = client()
    a.connect(keepalive=2, will=(topics[2], b"client not disconnected", 0, False))
    a.kill()
    got = b.expect(1, timeout=5)
    assert [(m.topic, m.payload) for m in got] == [(topics[2], b"client not disconnected")]

    a.connect(keepalive=2, will=(topics[2], b"client disconnected", 0, False))
    a.disconnect()
    assert b.drain(0.5) == []
    b.disconnect()


def test_zero_length_clientid(broker, client):
    """Paho `test_zero_length_clientid`: a zero-length client id with clean session 0 is refused,
    with clean session 1 it is accepted. (paho-mqtt will not even build the first CONNECT, so it
    goes on a raw socket.)
    [MQTT-3.1.3-8] zero-byte client id and clean session 0: CONNACK 0x02 (identifier rejected),
    then close; [MQTT-3.1.3-6] a zero-byte client id may be allowed: the server assigns one."""
    raw = Raw(broker.port)
    raw.send(connect_packet("", clean=False))
    reply = raw.read()
    assert reply is not None and reply.kind == 2 and reply.body[1] == 0x02, reply
    assert raw.closed_by_broker()
    raw.close()

    zero = client("")
    assert zero.connect(clean=True).reason_code == 0
    zero.disconnect()


def test_offline_message_queueing(client, topics, wildtopics):
    """Paho `test_offline_message_queueing`: a clean-session-0 subscriber that disconnected gets,
    on reconnecting, what was published meanwhile: QoS 1 and 2 for certain, QoS 0 optionally
    (this broker drops it by default). Session present is 1 on that reconnection.
    [MQTT-3.1.2-4] the session is resumed; [MQTT-3.1.2-5] QoS 1 and 2 messages are stored for the
    disconnected session (QoS 0 MAY be); [MQTT-3.2.2-2] session present 1."""
    a = client()
    a.connect(clean=False)
    a.subscribe(wildtopics[5], 2)
    a.disconnect()

    b = client("myclientid2")
    assert b.connect(clean=True).session_present is False
    b.publish(topics[1], b"qos 0", 0)
    b.publish(topics[2], b"qos 1", 1)
    b.publish(topics[3], b"qos 2", 2)
    b.disconnect()

    assert a.connect(clean=False).session_present is True
    got = a.expect(2, timeout=3) + a.drain(0.3)  # QoS 0 may or may not follow
    a.disconnect()
    assert len(got) in (2, 3), got
    received = {(m.topic, m.payload, m.qos) for m in got}
    assert {(topics[2], b"qos 1", 1), (topics[3], b"qos 2", 2)} <= received


def test_overlapping_subscriptions(client, topics, wildtopics):
    """Paho `test_overlapping_subscriptions`: subscribed to TopicA/# at QoS 2 and TopicA/+ at
    QoS 1, a QoS 2 publication to TopicA/C arrives once at QoS 2, or twice at QoS 2 and 1.
    [MQTT-3.3.5-1] the server MUST deliver respecting the maximum QoS of all matching
    subscriptions."""
    a = client()
    a.connect()
    assert a.subscribe([wildtopics[6], wildtopics[0]], [2, 1]) == [2, 1]
    a.publish(topics[3], b"overlapping topic filters", 2)
    got = a.expect(2, timeout=1)
    a.disconnect()
    assert len(got) in (1, 2), got
    if len(got) == 1:
        assert got[0].qos == 2
    else:
        assert sorted(m.qos for m in got) == [1, 2]


def test_keepalive(client, topics):
    """Paho `test_keepalive`: a client that goes silent (no packets, no PINGREQ) is cut off once
    its keep alive has lapsed, and its will is published. (Paho: keep alive 5 s, waits 15 s;
    here keep alive 1 s, so the cut comes after 1.5 s.)
    [MQTT-3.1.2-24] no packet within 1.5 x keep alive: the server MUST disconnect as if the
    network had failed; [MQTT-3.1.2-8] hence the will."""
    b = client("myclientid2")
    b.connect(clean=True, keepalive=0)
    b.subscribe(topics[4], 2)
    a = client()
    a.connect(keepalive=1, will=(topics[4], b"keepalive expiry", 0, False))
    start = time.monotonic()
    a.silence()
    sock = a.steal_socket()
    got = b.expect(1, timeout=5)
    assert [(m.topic, m.payload) for m in got] == [(topics[4], b"keepalive expiry")]
    assert 1.0 <= time.monotonic() - start < 4.0
    assert sock.closed_by_broker(2), "the silent client's connection is still open"
    sock.close()
    b.disconnect()


def test_redelivery_on_reconnect(broker, client, topics, wildtopics):
    """Paho `test_redelivery_on_reconnect`: a clean-session-0 subscriber that stops reading
    (`pause()`) leaves a QoS 1 and a QoS 2 delivery unacknowledged; when it reconnects both are
    sent again, with DUP set and their original packet identifiers.
    [MQTT-4.4.0-1] on reconnection with clean session 0 the server MUST resend unacknowledged
    PUBLISH packets with their original packet identifiers; [MQTT-3.3.1-1] DUP MUST be 1 on a
    redelivery; [MQTT-3.1.2-4] the session is resumed."""
    b = client("myclientid2")
    b.connect(clean=False)
    b.subscribe(wildtopics[6], 2)
    b.silence()
    raw = b.steal_socket()
    a = client()
    a.connect()
    a.publish(topics[1], b"", 1)
    a.publish(topics[3], b"", 2)
    first = [raw.read(), raw.read()]  # what the broker sent; never acknowledged
    assert [(p.kind, p.qos) for p in first] == [(3, 1), (3, 2)]
    original_ids = {p.packet_id for p in first}
    raw.close()
    a.disconnect()
    assert b.messages.empty()

    assert b.connect(clean=False).session_present is True
    got = b.expect(2, timeout=3)
    b.disconnect()
    assert sorted(m.topic for m in got) == sorted([topics[1], topics[3]])
    assert all(m.dup for m in got), [(m.topic, m.dup) for m in got]
    assert {m.mid for m in got} == original_ids


def test_subscribe_failure(client, topics, prefix):
    """Paho `test_subscribe_failure`: subscribing to a filter the server does not allow gets the
    SUBACK return code 0x80: the suite's ACL forbids "test/nosubscribe" (the tenant here has that
    deny rule, and the same for "{prefix}/nosubscribe"), each code in the position of its filter.
    With Mosquitto's read semantics the wildcards that overlap the deny are granted and never
    carry the denied topic.
    [MQTT-3.8.4-1] SUBACK; [MQTT-3.9.3-1] return codes in the order of the filters;
    [MQTT-3.9.3-2] codes other than 0x00, 0x01, 0x02 and 0x80 MUST NOT be used."""
    a = client()
    a.connect()
    assert a.subscribe(topics[0], 2) == [2]
    nosubscribe = prefix + "nosubscribe"
    assert a.subscribe(nosubscribe, 2) == [0x80]
    assert a.subscribe("test/nosubscribe", 2) == [0x80]
    assert a.subscribe([topics[0], nosubscribe], [1, 2]) == [1, 0x80]
    # Overlapping wildcards are granted; the denied topic never reaches them.
    assert a.subscribe(["#", "+/+", prefix + "#"], [1, 1, 1]) == [1, 1, 1]
    a.drain(0.3)  # retained messages of other tests
    a.publish(nosubscribe, b"not for us", 1)
    a.publish("test/nosubscribe", b"not for us either", 1)
    a.publish(topics[0], b"for us", 1)
    got = a.drain(0.5)
    assert [m.payload for m in got] == [b"for us"], [(m.topic, m.payload) for m in got]
    a.disconnect()


def test_dollar_topics(client, topics):
    """Paho `test_dollar_topics`: a subscriber to wildcard filters gets nothing published to
    `$TopicA/B`. The broker refuses client publications to `$` topics (acknowledged and dropped
    on 3.1.1), so beyond Paho this also checks the broker's own `$SYS/broker/...` topics
    (published each second here): `#`, `+/+/+` and `+/broker/#` never match them, `$SYS/#` does.
    [MQTT-4.7.2-1] the server MUST NOT match filters starting with a wildcard with topic names
    beginning with `$`."""
    b = client("myclientid2")
    b.connect(clean=True, keepalive=0)
    b.subscribe(["#", "+/+", "+/+/+", "+/broker/#"], 2)
    b.drain(0.3)  # retained messages of other tests
    b.publish("$" + TOPICS[1], b"", 1)
    time.sleep(1.5)  # more than one $SYS interval
    got = [m.topic for m in b.drain(0.2)]
    assert not [t for t in got if t.startswith("$")], got
    b.subscribe("$SYS/#", 0)
    sys_topics = [m.topic for m in b.expect(1, timeout=3)]
    b.disconnect()
    assert sys_topics and sys_topics[0].startswith("$SYS/broker/")


def test_unsubscribe(client, topics):
    """Paho `test_unsubscribe`: subscribed to three topics and unsubscribed from one, a client
    gets the publications to the other two only.
    [MQTT-3.10.4-1] filters are compared character by character and the subscription deleted;
    [MQTT-3.10.4-2] no new messages for it; [MQTT-3.10.4-4] UNSUBACK."""
    b = client("myclientid2")
    b.connect(clean=True)
    for topic in topics[:3]:
        b.subscribe(topic, 2)
    b.unsubscribe(topics[0])
    a = client()
    a.connect(clean=True)
    for topic in topics[:3]:
        a.publish(topic, b"", 1)
    got = b.expect(3, timeout=1)
    a.disconnect()
    b.disconnect()
    assert sorted(m.topic for m in got) == sorted(topics[1:3])
