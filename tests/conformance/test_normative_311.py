"""Server-side normative statements of OASIS MQTT 3.1.1 (mqtt-v3.1.1-os), over raw TCP.

Each test names the statements it checks. Packets are built byte by byte by `raw` (written from
the specification, not from the broker's codec). "Closed" means the server closed the Network
Connection; on 3.1.1 a rejected CONNECT that does not conform to section 3.1 gets no CONNACK.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.conformance.raw import (
    CONNACK,
    PINGRESP,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    UNSUBACK,
    V311,
    Client,
    Closed,
    Packet,
    Will,
    ack,
    connect,
    disconnect,
    frame,
    pingreq,
    publish,
    subscribe,
    u16,
    uid,
    unsubscribe,
    utf8,
)

Open = Callable[..., Client]


@pytest.fixture
def open_client(broker) -> Iterator[Open]:
    """A factory of raw TCP clients to the module's broker, all closed at teardown."""
    clients: list[Client] = []

    def make() -> Client:
        client = Client(broker.port, V311)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def session(open_client: Open) -> Callable[..., tuple[Client, Packet]]:
    """Connect and require CONNACK 0 as the first packet [MQTT-3.2.0-1] [MQTT-3.1.4-4]."""

    def make(client_id: str | None = None, **kwargs) -> tuple[Client, Packet]:
        client = open_client()
        client.send(connect(uid() if client_id is None else client_id, **kwargs))
        connack = client.expect(CONNACK)
        assert connack.reason == 0, f"CONNACK return code {connack.reason:#x}"
        assert connack.ack_flags & 0xFE == 0
        return client, connack

    return make


def connected(session, client_id: str | None = None, **kwargs) -> Client:
    return session(client_id, **kwargs)[0]


def sub(client: Client, *filters: tuple[str, int], packet_id: int = 1) -> list[int]:
    client.send(subscribe(packet_id, list(filters)))
    suback = client.expect(SUBACK)
    assert suback.packet_id == packet_id
    return suback.codes


def rejected_without_connack(client: Client, data: bytes) -> None:
    """[MQTT-3.1.4-1]: a CONNECT that does not conform is closed without a CONNACK."""
    client.send(data)
    seen = client.closed()
    assert not [p for p in seen if p.type == CONNACK], seen


# -- CONNECT ----------------------------------------------------------------------------------


@pytest.mark.parametrize("first", [pingreq(), publish("a/b", b"x"), subscribe(1, [("a", 0)])])
def test_first_packet_must_be_connect(open_client: Open, first: bytes) -> None:
    """[MQTT-3.1.0-1] [MQTT-4.8.0-1]: anything before CONNECT is a protocol violation."""
    client = open_client()
    client.send(first)
    assert client.closed() == []


def test_second_connect_is_a_protocol_violation(session) -> None:
    """[MQTT-3.1.0-2]: a second CONNECT disconnects the client (no second CONNACK)."""
    client = connected(session)
    client.send(connect(uid()))
    assert not [p for p in client.closed() if p.type == CONNACK]


def test_wrong_protocol_name_is_not_accepted(open_client: Open) -> None:
    """[MQTT-3.1.2-1]: the server may disconnect, and must not go on as if it were MQTT."""
    client = open_client()
    client.send(connect(uid(), name=b"MQTX"))
    seen = client.closed()
    assert not [p for p in seen if p.type == CONNACK and p.reason == 0], seen


@pytest.mark.parametrize("level", [0, 2, 3, 6, 255])
def test_unsupported_protocol_level(open_client: Open, level: int) -> None:
    """[MQTT-3.1.2-2]: CONNACK 0x01 (unacceptable protocol level), then disconnect;
    [MQTT-3.2.2-4] [MQTT-3.2.2-5]: non-zero return code, session present 0, closed."""
    client = open_client()
    client.send(connect(uid(), level=level))
    seen = client.closed()
    assert [p.type for p in seen] == [CONNACK]
    assert seen[0].reason == 0x01 and not seen[0].session_present


def test_connect_reserved_flag_must_be_zero(open_client: Open) -> None:
    """[MQTT-3.1.2-3] [MQTT-3.1.4-1]"""
    rejected_without_connack(open_client(), connect(uid(), flags=0x02 | 0x01 | 0xC0))


@pytest.mark.parametrize(
    "flags, statement",
    [
        (0xC0 | 0x02 | 0x04 | 0x18, "[MQTT-3.1.2-14] will QoS 3"),
        (0xC0 | 0x02 | 0x08, "[MQTT-3.1.2-13] [MQTT-3.1.2-11] will QoS without will flag"),
        (0xC0 | 0x02 | 0x20, "[MQTT-3.1.2-15] [MQTT-3.1.2-11] will retain without will flag"),
    ],
)
def test_will_flags_must_be_consistent(open_client: Open, flags: int, statement: str) -> None:
    """Will QoS/retain only with the will flag, QoS never 3; else not a conforming CONNECT
    [MQTT-3.1.4-1]."""
    will = Will("w/t", b"x") if flags & 0x04 else None
    rejected_without_connack(open_client(), connect(uid(), flags=flags, will=will))


def test_will_flag_requires_will_topic_and_message(open_client: Open) -> None:
    """[MQTT-3.1.2-9]: with the will flag the payload must hold will topic and message."""
    data = frame(1, 0, utf8("MQTT") + bytes((4, 0x02 | 0x04)) + u16(60) + utf8(uid()))
    rejected_without_connack(open_client(), data)


def test_password_without_user_name(open_client: Open) -> None:
    """[MQTT-3.1.2-22]: user name flag 0 requires password flag 0."""
    rejected_without_connack(open_client(), connect(uid(), username=None, password=b"pw1"))


def test_user_name_flag_requires_user_name(open_client: Open) -> None:
    """[MQTT-3.1.2-19] [MQTT-3.1.2-21]: flagged fields must be present."""
    data = connect(uid(), username=None, password=None, flags=0x02 | 0x80 | 0x40)
    rejected_without_connack(open_client(), data)


def test_fields_without_flags_must_not_be_present(open_client: Open) -> None:
    """[MQTT-3.1.2-18] [MQTT-3.1.2-20]: user name and password without their flags."""
    data = connect(uid(), username=None, password=None, tail=utf8("acme/d1") + utf8("pw1"))
    rejected_without_connack(open_client(), data)


def test_client_id_of_23_alphanumerics_is_allowed(session) -> None:
    """[MQTT-3.1.3-5]"""
    client_id = ("a0Z9" + uid() * 3)[:23]
    assert len(client_id) == 23
    connected(session, client_id)


def test_zero_length_client_id_gets_a_unique_id(session) -> None:
    """[MQTT-3.1.3-6]: if allowed, each such client gets its own identifier (two of them
    coexist instead of taking each other over)."""
    first = connected(session, "")
    second = connected(session, "")
    topic = f"zero/{uid()}"
    sub(first, (topic, 0))
    sub(second, (topic, 0))
    publisher = connected(session)
    publisher.send(publish(topic, b"both"))
    assert first.expect(PUBLISH).payload == b"both"
    assert second.expect(PUBLISH).payload == b"both"


def test_zero_length_client_id_with_clean_session_0(open_client: Open) -> None:
    """[MQTT-3.1.3-8]: CONNACK 0x02 (identifier rejected), then close;
    [MQTT-3.2.2-4] [MQTT-3.2.2-5]: session present 0 with a non-zero return code."""
    client = open_client()
    client.send(connect("", clean=False))
    seen = client.closed()
    assert [(p.type, p.reason, p.session_present) for p in seen] == [(CONNACK, 0x02, False)]


@pytest.mark.parametrize(
    "field, value",
    [("client_id", b"id-\xed\xa0\x80"), ("client_id", b"id\x00x"), ("username", b"acme/\xc0\xaf")],
)
def test_connect_strings_must_be_well_formed_utf8(open_client: Open, field: str, value) -> None:
    """[MQTT-3.1.3-4] [MQTT-3.1.3-11] [MQTT-1.5.3-1] [MQTT-1.5.3-2]: ill-formed UTF-8 (here a
    surrogate, an overlong encoding) or U+0000 closes the connection, never accepted."""
    client = open_client()
    kwargs = {"client_id": uid(), field: value}
    client.send(connect(**kwargs))
    seen = client.closed()
    assert not [p for p in seen if p.type == CONNACK and p.reason == 0], seen


def test_client_id_takeover(session) -> None:
    """[MQTT-3.1.4-2]: a second connection with the same client id disconnects the first."""
    client_id = uid()
    first = connected(session, client_id)
    second = connected(session, client_id)
    first.closed()
    second.send(pingreq())
    second.expect(PINGRESP)


def test_keep_alive_one_and_a_half_times(session) -> None:
    """[MQTT-3.1.2-24]: no packet within 1.5 x Keep Alive: the server disconnects."""
    client = connected(session, keep_alive=1)
    start = time.monotonic()
    client.closed(timeout=4.0)
    elapsed = time.monotonic() - start
    assert 1.4 <= elapsed <= 3.0, elapsed


def test_keep_alive_is_satisfied_by_pingreq(session) -> None:
    """[MQTT-3.1.2-24] [MQTT-3.12.4-1]: PINGREQs within the Keep Alive keep it open."""
    client = connected(session, keep_alive=1)
    for _ in range(5):
        time.sleep(0.5)
        client.send(pingreq())
        client.expect(PINGRESP)


def test_connack_session_present(session) -> None:
    """[MQTT-3.2.2-1] clean session 1: 0; [MQTT-3.2.2-3] clean session 0 without state: 0;
    [MQTT-3.2.2-2] with stored state: 1; [MQTT-3.1.2-6] clean session 1 discards it;
    [MQTT-3.1.2-4] [MQTT-3.1.4-3] the state is the session's subscriptions."""
    client_id = uid()
    client, connack = session(client_id, clean=True)
    assert not connack.session_present
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=False)
    assert not connack.session_present
    topic = f"present/{uid()}"
    sub(client, (topic, 1))
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=False)
    assert connack.session_present
    publisher = connected(session)
    publisher.send(publish(topic, b"kept", qos=1, packet_id=1))
    publisher.expect(PUBACK)
    assert client.expect(PUBLISH).payload == b"kept"  # the subscription was resumed
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=True)
    assert not connack.session_present
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=False)
    assert not connack.session_present
    client.send(disconnect())


def test_rejected_connect_stops_processing(open_client: Open, session) -> None:
    """[MQTT-3.1.4-5]: nothing after a rejected CONNECT is processed (the retained PUBLISH
    sent right behind a bad password is not stored); [MQTT-3.2.2-4] [MQTT-3.2.2-5]."""
    topic = f"rejected/{uid()}"
    client = open_client()
    client.send(connect(uid(), password=b"wrong") + publish(topic, b"x", retain=True))
    seen = client.closed()
    assert [p.type for p in seen] == [CONNACK]
    assert seen[0].reason in (0x04, 0x05) and not seen[0].session_present
    observer = connected(session)
    sub(observer, (topic, 0))
    assert observer.barrier() == []


# -- PUBLISH ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, statement",
    [
        (publish("a/b", b"x", flags=0x06, packet_id=1), "[MQTT-3.3.1-4] QoS 3"),
        (publish("a/b", b"x", flags=0x08), "[MQTT-3.3.1-2] DUP on QoS 0"),
        (publish("a/+", b"x"), "[MQTT-3.3.2-2] [MQTT-4.7.1-1] + in a topic name"),
        (publish("a/#", b"x"), "[MQTT-3.3.2-2] [MQTT-4.7.1-1] # in a topic name"),
        (publish("a/b", b"x", qos=1, packet_id=0), "[MQTT-2.3.1-1] packet id 0"),
        (publish("", b"x"), "[MQTT-4.7.3-1] empty topic name"),
        (publish(b"a/\x00b", b"x"), "[MQTT-4.7.3-2] [MQTT-1.5.3-2] U+0000"),
        (publish(b"a/\xed\xa0\x80", b"x"), "[MQTT-1.5.3-1] UTF-16 surrogate"),
        (publish(b"a/\xc0\xaf", b"x"), "[MQTT-1.5.3-1] overlong encoding"),
        (publish(b"a/\xff", b"x"), "[MQTT-1.5.3-1] [MQTT-3.3.2-1] not UTF-8"),
    ],
)
def test_invalid_publish_closes(session, data: bytes, statement: str) -> None:
    """[MQTT-4.8.0-1]: a protocol violation closes the connection."""
    client = connected(session)
    client.send(data)
    assert [p for p in client.closed() if p.type in (PUBACK, PUBREC)] == []


def test_qos1_flow(session) -> None:
    """[MQTT-4.3.2-2] [MQTT-2.3.1-6] [MQTT-3.3.4-1]: PUBACK with the same packet id; after it,
    a PUBLISH with that id (even with DUP) is a new publication."""
    topic = f"qos1/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 1))
    publisher = connected(session)
    publisher.send(publish(topic, b"first", qos=1, packet_id=7))
    assert publisher.expect(PUBACK).packet_id == 7
    publisher.send(publish(topic, b"second", qos=1, packet_id=7, dup=True))
    assert publisher.expect(PUBACK).packet_id == 7
    payloads = []
    for _ in range(2):
        packet = subscriber.expect(PUBLISH)
        subscriber.send(ack(PUBACK, packet.packet_id))
        payloads.append(packet.payload)
    assert payloads == [b"first", b"second"]


def test_qos2_flow(session) -> None:
    """[MQTT-4.3.3-2] [MQTT-2.3.1-6]: PUBREC with the packet id; a resent PUBLISH before PUBREL
    gets PUBREC again and is not delivered twice; PUBREL gets PUBCOMP; after it the id is new."""
    topic = f"qos2/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 0))
    publisher = connected(session)
    publisher.send(publish(topic, b"once", qos=2, packet_id=9))
    assert publisher.expect(PUBREC).packet_id == 9
    publisher.send(publish(topic, b"once", qos=2, packet_id=9, dup=True))
    assert publisher.expect(PUBREC).packet_id == 9
    publisher.send(ack(PUBREL, 9))
    assert publisher.expect(PUBCOMP).packet_id == 9
    publisher.send(publish(topic, b"again", qos=2, packet_id=9))
    assert publisher.expect(PUBREC).packet_id == 9
    publisher.send(ack(PUBREL, 9))
    assert publisher.expect(PUBCOMP).packet_id == 9
    publisher.send(publish(topic, b"marker"))
    assert [p.payload for p in subscriber.until_marker()] == [b"once", b"again"]


def test_outbound_qos1_packet_id_and_dup(session) -> None:
    """[MQTT-4.3.2-1] [MQTT-2.3.1-1] [MQTT-3.3.1-3]: the server's QoS 1 PUBLISH has a non-zero
    packet id and DUP 0 (the publisher's DUP is not propagated)."""
    topic = f"dup/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 1))
    publisher = connected(session)
    publisher.send(publish(topic, b"x", qos=1, packet_id=3, dup=True))
    publisher.expect(PUBACK)
    packet = subscriber.expect(PUBLISH)
    assert (packet.qos, packet.dup, packet.retain) == (1, False, False)
    assert packet.packet_id
    subscriber.send(ack(PUBACK, packet.packet_id))
    subscriber.silent()


def test_outbound_qos2_flow(session) -> None:
    """[MQTT-4.3.3-1]: QoS 2 PUBLISH with DUP 0; PUBREL (flags 0010 [MQTT-3.6.1-1]) with the
    same id answers PUBREC; nothing is re-sent after PUBCOMP."""
    topic = f"out2/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 2))
    publisher = connected(session)
    publisher.send(publish(topic, b"x", qos=2, packet_id=1))
    publisher.expect(PUBREC)
    publisher.send(ack(PUBREL, 1))
    publisher.expect(PUBCOMP)
    packet = subscriber.expect(PUBLISH)
    assert (packet.qos, packet.dup) == (2, False) and packet.packet_id
    subscriber.send(ack(PUBREC, packet.packet_id))
    pubrel = subscriber.expect(PUBREL)
    assert pubrel.flags == 0x02 and pubrel.packet_id == packet.packet_id
    subscriber.send(ack(PUBCOMP, packet.packet_id))
    subscriber.silent()


@pytest.mark.parametrize("granted, published, received", [(0, 2, 0), (1, 2, 1), (2, 0, 0)])
def test_delivery_qos_is_the_minimum(session, granted: int, published: int, received: int):
    """[MQTT-3.8.4-6]: min(QoS of the message, granted QoS)."""
    topic = f"minqos/{uid()}"
    subscriber = connected(session)
    assert sub(subscriber, (topic, granted)) == [granted]
    publisher = connected(session)
    publisher.send(publish(topic, b"x", qos=published, packet_id=published and 1 or None))
    assert subscriber.expect(PUBLISH).qos == received


def test_overlapping_subscriptions_respect_the_maximum_qos(session) -> None:
    """[MQTT-3.3.5-1]: delivered respecting the maximum QoS of all matching subscriptions."""
    root = f"overlap/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (f"{root}/+", 0), (f"{root}/x", 2))
    publisher = connected(session)
    publisher.send(publish(f"{root}/x", b"x", qos=2, packet_id=1))
    publisher.expect(PUBREC)
    publisher.send(ack(PUBREL, 1), publish(f"{root}/x", b"marker"))
    copies = subscriber.until_marker()
    assert copies and max(p.qos for p in copies if p.type == PUBLISH) == 2, copies


# -- retained messages ------------------------------------------------------------------------


def test_retained_message_is_stored_with_its_qos(session) -> None:
    """[MQTT-3.3.1-5] stored with its QoS; [MQTT-3.3.1-6] sent to a new subscription with
    [MQTT-3.3.1-8] RETAIN 1; [MQTT-3.1.2-7] it outlives the publisher's session."""
    topic = f"retained/{uid()}"
    publisher = connected(session)
    publisher.send(publish(topic, b"kept", qos=1, retain=True, packet_id=1))
    publisher.expect(PUBACK)
    publisher.send(disconnect())
    publisher.closed()
    subscriber = connected(session)
    sub(subscriber, (topic, 2))
    packet = subscriber.expect(PUBLISH)
    assert (packet.payload, packet.retain, packet.qos) == (b"kept", True, 1)


def test_retain_flag_is_0_on_established_subscriptions(session) -> None:
    """[MQTT-3.3.1-9]"""
    topic = f"retained/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 0))
    publisher = connected(session)
    publisher.send(publish(topic, b"live", retain=True))
    packet = subscriber.expect(PUBLISH)
    assert (packet.payload, packet.retain) == (b"live", False)


def test_retained_message_is_replaced(session) -> None:
    """[MQTT-3.3.1-5] [MQTT-3.3.1-7]: a new retained message (QoS 0 too) replaces the old."""
    topic = f"retained/{uid()}"
    publisher = connected(session)
    publisher.send(publish(topic, b"old", qos=1, retain=True, packet_id=1))
    publisher.expect(PUBACK)
    publisher.send(publish(topic, b"new", retain=True))
    publisher.barrier()
    subscriber = connected(session)
    sub(subscriber, (topic, 1))
    assert [(p.payload, p.qos) for p in subscriber.barrier()] == [(b"new", 0)]


def test_zero_length_retained_message_clears(session) -> None:
    """[MQTT-3.3.1-10]: delivered as normal to current subscribers, and it removes the retained
    message; [MQTT-3.3.1-11]: it is not itself stored."""
    topic = f"retained/{uid()}"
    current = connected(session)
    sub(current, (topic, 0))
    publisher = connected(session)
    publisher.send(publish(topic, b"x", retain=True), publish(topic, b"", retain=True))
    assert current.expect(PUBLISH).payload == b"x"
    assert current.expect(PUBLISH).payload == b""
    later = connected(session)
    sub(later, (topic, 0))
    assert later.barrier() == []


def test_non_retained_publish_leaves_retained_message(session) -> None:
    """[MQTT-3.3.1-12]"""
    topic = f"retained/{uid()}"
    publisher = connected(session)
    publisher.send(publish(topic, b"keep", retain=True), publish(topic, b"other"))
    publisher.barrier()
    subscriber = connected(session)
    sub(subscriber, (topic, 0))
    assert [(p.payload, p.retain) for p in subscriber.barrier()] == [(b"keep", True)]


def test_unauthorized_publish_is_acknowledged_or_closed(session) -> None:
    """[MQTT-3.3.5-2]: a PUBLISH the server does not authorize (here a `$` topic) gets the
    normal positive acknowledgement or the connection is closed."""
    client = connected(session)
    client.send(publish(f"$denied/{uid()}", b"x", qos=1, packet_id=5))
    try:
        packet = client.read()
    except Closed:
        return
    assert (packet.type, packet.packet_id) == (PUBACK, 5)


# -- ordering, sessions -----------------------------------------------------------------------


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_ordered_topic(session, qos: int) -> None:
    """[MQTT-4.6.0-5] [MQTT-4.6.0-6]: same topic and QoS: delivered in the order received."""
    topic = f"order/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, qos))
    publisher = connected(session)
    count = 100
    publisher.send(
        b"".join(
            publish(topic, str(i).encode(), qos=qos, packet_id=(i + 1) if qos else None)
            for i in range(count)
        )
    )
    received = []
    while len(received) < count:
        packet = subscriber.read()
        if packet.type == PUBLISH:
            received.append(int(packet.payload))
            if qos == 1:
                subscriber.send(ack(PUBACK, packet.packet_id))
            elif qos == 2:
                subscriber.send(ack(PUBREC, packet.packet_id))
        elif packet.type == PUBREL:
            subscriber.send(ack(PUBCOMP, packet.packet_id))
    assert received == list(range(count))


def test_persistent_session_resends_and_stores(session) -> None:
    """[MQTT-4.4.0-1] unacknowledged PUBLISH re-sent with its original packet id and
    [MQTT-3.3.1-1] DUP 1; [MQTT-3.1.2-5] QoS 1 messages arriving while disconnected are kept;
    [MQTT-4.6.0-1] in their original order."""
    client_id, topic = uid(), f"resend/{uid()}"
    subscriber = connected(session, client_id, clean=False)
    sub(subscriber, (topic, 1))
    publisher = connected(session)
    publisher.send(publish(topic, b"one", qos=1, packet_id=1))
    first = subscriber.expect(PUBLISH)
    subscriber.send(disconnect())  # without PUBACK
    subscriber.closed()
    publisher.send(publish(topic, b"two", qos=1, packet_id=2))
    publisher.expect(PUBACK)
    publisher.expect(PUBACK)
    subscriber, connack = session(client_id, clean=False)
    assert connack.session_present
    again = subscriber.expect(PUBLISH)
    assert (again.payload, again.packet_id, again.dup) == (b"one", first.packet_id, True)
    subscriber.send(ack(PUBACK, again.packet_id))
    later = subscriber.expect(PUBLISH)
    assert (later.payload, later.dup) == (b"two", False)
    subscriber.send(ack(PUBACK, later.packet_id), disconnect())


def test_persistent_session_resends_pubrel(session) -> None:
    """[MQTT-4.4.0-1]: an unacknowledged PUBREL is re-sent with its packet id on reconnect."""
    client_id, topic = uid(), f"resend/{uid()}"
    subscriber = connected(session, client_id, clean=False)
    sub(subscriber, (topic, 2))
    publisher = connected(session)
    publisher.send(publish(topic, b"x", qos=2, packet_id=1))
    packet = subscriber.expect(PUBLISH)
    subscriber.send(ack(PUBREC, packet.packet_id))
    assert subscriber.expect(PUBREL).packet_id == packet.packet_id
    subscriber.send(disconnect())  # without PUBCOMP
    subscriber.closed()
    subscriber, connack = session(client_id, clean=False)
    assert connack.session_present
    pubrel = subscriber.expect(PUBREL)
    assert (pubrel.packet_id, pubrel.flags) == (packet.packet_id, 0x02)
    subscriber.send(ack(PUBCOMP, packet.packet_id))
    subscriber.silent()
    subscriber.send(disconnect())


# -- fixed header flags, SUBSCRIBE, UNSUBSCRIBE, PINGREQ -------------------------------------


@pytest.mark.parametrize(
    "data, statement",
    [
        (ack(PUBREL, 1, flags=0x00), "[MQTT-3.6.1-1] PUBREL flags 0000"),
        (ack(PUBREL, 1, flags=0x03), "[MQTT-3.6.1-1] PUBREL flags 0011"),
        (subscribe(1, [("a", 0)], flags=0x00), "[MQTT-3.8.1-1] SUBSCRIBE flags 0000"),
        (subscribe(1, [("a", 0)], flags=0x0A), "[MQTT-3.8.1-1] SUBSCRIBE flags 1010"),
        (unsubscribe(1, ["a"], flags=0x00), "[MQTT-3.10.1-1] UNSUBSCRIBE flags 0000"),
        (unsubscribe(1, ["a"], flags=0x06), "[MQTT-3.10.1-1] UNSUBSCRIBE flags 0110"),
        (pingreq(flags=0x01), "[MQTT-2.2.2-1] [MQTT-2.2.2-2] PINGREQ flags 0001"),
        (ack(PUBACK, 1, flags=0x02), "[MQTT-2.2.2-1] [MQTT-2.2.2-2] PUBACK flags 0010"),
        (disconnect(flags=0x08), "[MQTT-3.14.1-1] DISCONNECT flags 1000"),
        (frame(15, 0, b""), "[MQTT-4.8.0-1] packet type 15 is reserved in 3.1.1"),
        (frame(0, 0, b""), "[MQTT-4.8.0-1] packet type 0 is reserved"),
    ],
)
def test_reserved_fixed_header_bits(session, data: bytes, statement: str) -> None:
    """Invalid reserved flags (or a reserved type): the server closes the connection."""
    client = connected(session)
    client.send(data)
    assert [p for p in client.closed() if p.type in (PUBCOMP, SUBACK, UNSUBACK, PINGRESP)] == []


@pytest.mark.parametrize(
    "data, statement",
    [
        (frame(8, 0x02, u16(1)), "[MQTT-3.8.3-3] SUBSCRIBE without topic filters"),
        (subscribe(1, [("a", 3)]), "[MQTT-3-8.3-4] requested QoS 3"),
        (subscribe(1, [("a", 0x04)]), "[MQTT-3-8.3-4] reserved option bits"),
        (subscribe(1, [("a", 0x81)]), "[MQTT-3-8.3-4] reserved option bits"),
        (subscribe(1, [(b"a/\xed\xb0\x80", 0)]), "[MQTT-3.8.3-1] [MQTT-1.5.3-1] bad UTF-8"),
        (subscribe(1, [(b"a/\x00", 0)]), "[MQTT-4.7.3-2] [MQTT-1.5.3-2] U+0000"),
        (frame(10, 0x02, u16(1)), "[MQTT-3.10.3-2] UNSUBSCRIBE without topic filters"),
        (unsubscribe(1, [b"\xc3"]), "[MQTT-3.10.3-1] [MQTT-1.5.3-1] bad UTF-8"),
    ],
)
def test_invalid_subscribe_or_unsubscribe_closes(session, data: bytes, statement: str) -> None:
    client = connected(session)
    client.send(data)
    assert [p for p in client.closed() if p.type in (SUBACK, UNSUBACK)] == []


@pytest.mark.parametrize("bad_filter", ["a/#/b", "a#", "a/b+", "+a/b", "#/a", ""])
def test_invalid_topic_filter_fails_or_closes(session, bad_filter: str) -> None:
    """[MQTT-4.7.1-2] [MQTT-4.7.1-3] [MQTT-4.7.3-1]: a filter breaking the wildcard rules is
    never granted: either its SUBACK return code is 0x80 or the connection is closed."""
    client = connected(session)
    client.send(subscribe(4, [("ok/" + uid(), 1), (bad_filter, 1)]))
    try:
        packet = client.read()
    except Closed:
        return
    assert (packet.type, packet.packet_id, packet.codes) == (SUBACK, 4, [1, 0x80])


def test_suback_per_filter_in_order(session) -> None:
    """[MQTT-3.8.4-1] [MQTT-3.8.4-2] SUBACK with the same packet id; [MQTT-3.8.4-4] several
    filters as several SUBSCRIBEs, one SUBACK; [MQTT-3.8.4-5] [MQTT-3.9.3-1] [MQTT-3.9.3-2]
    one return code per filter, in order, from 0x00/0x01/0x02/0x80."""
    root = f"suback/{uid()}"
    client = connected(session)
    codes = sub(client, (f"{root}/a", 2), (f"{root}/b", 0), (f"{root}/c", 1), packet_id=0x1234)
    assert codes == [2, 0, 1]
    publisher = connected(session)
    for name in "abc":
        publisher.send(publish(f"{root}/{name}", name.encode(), qos=2, packet_id=1))
        publisher.expect(PUBREC)
        publisher.send(ack(PUBREL, 1))
        publisher.expect(PUBCOMP)
    publisher.send(publish(f"{root}/a", b"marker"))
    got = {p.payload: p.qos for p in client.until_marker() if p.type == PUBLISH}
    assert got == {b"a": 2, b"b": 0, b"c": 1}


def test_identical_subscription_is_replaced(session) -> None:
    """[MQTT-3.8.4-3]: the new subscription replaces the old (new maximum QoS, one copy per
    message) and the retained message is re-sent."""
    topic = f"replace/{uid()}"
    publisher = connected(session)
    publisher.send(publish(topic, b"retained", retain=True))
    publisher.barrier()
    client = connected(session)
    sub(client, (topic, 0))
    assert client.expect(PUBLISH).payload == b"retained"
    sub(client, (topic, 1), packet_id=2)
    assert client.expect(PUBLISH).payload == b"retained"
    publisher.send(publish(topic, b"live", qos=1, packet_id=1), publish(topic, b"marker"))
    copies = client.until_marker()
    assert [(p.payload, p.qos) for p in copies] == [(b"live", 1)]


def test_unsuback_even_when_nothing_matched(session) -> None:
    """[MQTT-3.10.4-4] [MQTT-3.10.4-5]: UNSUBACK with the same packet id."""
    client = connected(session)
    client.send(unsubscribe(0x0102, [f"never/{uid()}"]))
    assert client.expect(UNSUBACK).packet_id == 0x0102


def test_unsubscribe_compares_filters_exactly(session) -> None:
    """[MQTT-3.10.4-1]: filters are compared character by character (`u/+` does not remove
    `u/a`); [MQTT-3.10.4-6] one UNSUBACK for several; [MQTT-3.10.4-2] delivery then stops."""
    root = f"unsub/{uid()}"
    client = connected(session)
    sub(client, (f"{root}/a", 0), (f"{root}/+", 0), (f"{root}/m", 0))
    client.send(unsubscribe(3, [f"{root}/+", f"{root}/#"]))
    assert client.expect(UNSUBACK).packet_id == 3
    publisher = connected(session)
    publisher.send(publish(f"{root}/a", b"still"), publish(f"{root}/m", b"marker"))
    assert [p.payload for p in client.until_marker()] == [b"still"]
    client.send(unsubscribe(4, [f"{root}/a"]))
    client.expect(UNSUBACK)
    publisher.send(publish(f"{root}/a", b"gone"), publish(f"{root}/m", b"marker"))
    assert client.until_marker() == []


def test_pingresp(session) -> None:
    """[MQTT-3.12.4-1]"""
    client = connected(session)
    client.send(pingreq())
    packet = client.expect(PINGRESP)
    assert (packet.flags, packet.body) == (0, b"")


# -- wills and DISCONNECT ---------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["network", "protocol violation"])
def test_will_published_when_connection_ends(session, ending: str) -> None:
    """[MQTT-3.1.2-8]: published when the connection closes without DISCONNECT;
    [MQTT-3.1.2-16] will retain 0: a non-retained message (nothing kept for later)."""
    topic = f"will/{uid()}"
    watcher = connected(session)
    sub(watcher, (topic, 1))
    client = connected(session, will=Will(topic, b"gone", qos=1))
    if ending == "network":
        client.close()
    else:
        client.send(publish("a/#", b"x"))
        client.closed()
    packet = watcher.expect(PUBLISH)
    assert (packet.payload, packet.qos, packet.retain) == (b"gone", 1, False)
    watcher.send(ack(PUBACK, packet.packet_id))
    later = connected(session)
    sub(later, (topic, 0))
    assert later.barrier() == []


def test_will_retain(session) -> None:
    """[MQTT-3.1.2-17]: will retain 1: published as a retained message."""
    topic = f"will/{uid()}"
    client = connected(session, will=Will(topic, b"gone", retain=True))
    client.close()
    deadline = time.monotonic() + 3
    while True:
        later = connected(session)
        sub(later, (topic, 0))
        found = later.barrier()
        if found or time.monotonic() > deadline:
            break
        later.close()
        time.sleep(0.05)
    assert [(p.payload, p.retain) for p in found] == [(b"gone", True)]


def test_disconnect_discards_the_will(session) -> None:
    """[MQTT-3.14.4-3] [MQTT-3.1.2-10]: after DISCONNECT the will is not published;
    [MQTT-3.1.2-12] and a connection without will flag publishes none."""
    topic = f"will/{uid()}"
    watcher = connected(session)
    sub(watcher, (topic, 0))
    client = connected(session, will=Will(topic, b"must not appear"))
    client.send(disconnect())
    client.closed()
    plain = connected(session)
    plain.close()
    publisher = connected(session)
    publisher.send(publish(topic, b"marker"))
    assert watcher.until_marker() == []


# -- topic names and filters ------------------------------------------------------------------

MATCHING = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "any/thing", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+/tennis/#", "sport/tennis/player1", True),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("ACCOUNTS", "Accounts", False),
    ("a b/c", "a b/c", True),
    ("a//b", "a/b", False),
    ("a/b", "a/b/", False),
]


def test_topic_matching(session) -> None:
    """Topic matching rules of section 4.7 (conformance clause 7.1.1 item 2) [MQTT-3.3.2-3]:
    `#` includes the parent level, `+` exactly one level (possibly empty), case matters."""
    root = f"match/{uid()}"
    client = connected(session)
    filters = [(f"{root}/{i}/{f}", 0) for i, (f, _, _) in enumerate(MATCHING)]
    assert sub(client, *filters, (f"{root}/marker", 0)) == [0] * (len(filters) + 1)
    publisher = connected(session)
    publisher.send(
        *(publish(f"{root}/{i}/{t}", str(i).encode()) for i, (_, t, _) in enumerate(MATCHING)),
        publish(f"{root}/marker", b"marker"),
    )
    received = client.until_marker()
    assert sorted(int(p.payload) for p in received) == [
        i for i, (_, _, match) in enumerate(MATCHING) if match
    ]
    for packet in received:
        index = int(packet.payload)
        assert packet.topic == f"{root}/{index}/{MATCHING[index][1]}"


def test_no_normalization_of_topics(session) -> None:
    """[MQTT-4.7.3-4]: no normalization (NFC vs NFD); [MQTT-1.5.3-3]: U+FEFF is not stripped."""
    root = f"norm/{uid()}"
    nfc, nfd, bom = "caf\u00e9", "cafe\u0301", "\ufeffbom"
    client = connected(session)
    sub(client, (f"{root}/{nfc}", 0), (f"{root}/bom", 0), (f"{root}/m", 0))
    publisher = connected(session)
    publisher.send(
        publish(f"{root}/{nfd}", b"nfd"),
        publish(f"{root}/{bom}", b"bom"),
        publish(f"{root}/{nfc}", b"nfc"),
        publish(f"{root}/m", b"marker"),
    )
    assert [(p.topic, p.payload) for p in client.until_marker()] == [(f"{root}/{nfc}", b"nfc")]
    sub(client, (f"{root}/{bom}", 0), packet_id=2)
    publisher.send(publish(f"{root}/{bom}", b"bom"), publish(f"{root}/m", b"marker"))
    assert [p.topic for p in client.until_marker()] == [f"{root}/{bom}"]


def test_dollar_topics_are_not_matched_by_leading_wildcards(session) -> None:
    """[MQTT-4.7.2-1]: `#` and `+/...` do not match the server's `$SYS/...` topics, which
    `$SYS/#` does match."""
    wildcard = connected(session)
    sub(wildcard, ("#", 0), ("+/broker/#", 0), ("+/broker/uptime", 0))
    explicit = connected(session)
    sub(explicit, ("$SYS/#", 0))
    deadline = time.monotonic() + 5
    while True:  # a live (not retained) $SYS publish, which the wildcard client would get too
        packet = explicit.read(max(0.01, deadline - time.monotonic()))
        if packet.type == PUBLISH and not packet.retain:
            assert packet.topic.startswith("$SYS/")
            break
    marker_topic = f"dollar/{uid()}"
    publisher = connected(session)
    publisher.send(publish(marker_topic, b"marker"))
    seen = wildcard.until_marker(timeout=5)
    assert not [p.topic for p in seen if p.type == PUBLISH and p.topic.startswith("$")]


def test_remaining_length_of_more_than_four_bytes(session) -> None:
    """Remaining Length is at most four bytes (section 2.2.3): a fifth is a protocol
    violation [MQTT-4.8.0-1]."""
    client = connected(session)
    client.send(b"\x30\xff\xff\xff\xff\x01")
    client.closed()
