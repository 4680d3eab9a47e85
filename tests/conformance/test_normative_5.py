"""Server-side normative statements of OASIS MQTT 5.0 (mqtt-v5.0-os), over raw TCP.

Each test names the statements it checks. Packets are built byte by byte by `raw` (written from
the specification, not from the broker's codec). Every packet the server sends is also checked by
`Client5._check` against statements that hold for all traffic: the reason code tables, one
CONNACK and nothing before it, no DISCONNECT before a successful CONNACK, no Session Expiry on a
server DISCONNECT, the client's Maximum Packet Size and Topic Alias Maximum, and Request Problem
Information 0.

Where section 4.13 gives a Reason Code for a Malformed Packet or Protocol Error, the server
SHOULD send it in a DISCONNECT (MAY in a CONNACK); this broker does, and the tests hold it to
the code the specification names. AUTH / enhanced authentication is left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.broker.conftest import TENANTS, start_broker
from tests.conformance.raw import (
    ASSIGNED_CLIENT_IDENTIFIER,
    AUTH,
    CONNACK,
    CONTENT_TYPE,
    CORRELATION_DATA,
    DISCONNECT,
    MAXIMUM_PACKET_SIZE,
    MESSAGE_EXPIRY_INTERVAL,
    PAYLOAD_FORMAT_INDICATOR,
    PINGRESP,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    REASON_STRING,
    RECEIVE_MAXIMUM,
    REQUEST_PROBLEM_INFORMATION,
    REQUEST_RESPONSE_INFORMATION,
    RESPONSE_INFORMATION,
    RESPONSE_TOPIC,
    SERVER_KEEP_ALIVE,
    SESSION_EXPIRY_INTERVAL,
    SUBACK,
    SUBSCRIPTION_IDENTIFIER,
    TOPIC_ALIAS,
    TOPIC_ALIAS_MAXIMUM,
    UNSUBACK,
    USER_PROPERTY,
    V5,
    WILL_DELAY_INTERVAL,
    Client,
    Packet,
    Props,
    Will,
    ack,
    connect,
    disconnect,
    frame,
    options,
    pingreq,
    publish,
    subscribe,
    u16,
    uid,
    unsubscribe,
    utf8,
    vbi,
)

# Reason codes each packet may carry (5.0 Tables 3-1, 3-4 .. 3-10).
CONNACK_CODES = {0x00, *range(0x80, 0x8B), 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D}
CONNACK_CODES |= {0x9F}
PUBACK_CODES = {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}
PUBREL_CODES = {0x00, 0x92}
SUBACK_CODES = {0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}
UNSUBACK_CODES = {0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}
DISCONNECT_CODES = {0x00, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90}
DISCONNECT_CODES |= set(range(0x93, 0xA3))
MAX_PACKET_SIZE = 268_435_460


class Client5(Client):
    """A 5.0 client that checks every packet the server sends against the statements that
    apply to all traffic, using what its own CONNECT declared."""

    def __init__(self, port: int) -> None:
        super().__init__(port, V5)
        self.maximum_packet_size = MAX_PACKET_SIZE
        self.topic_alias_maximum = 0
        self.problem_information = True
        self.connack: Packet | None = None

    def send_connect(self, client_id: str | bytes | None = None, **kwargs) -> None:
        for identifier, value in kwargs.get("properties") or ():
            if identifier == MAXIMUM_PACKET_SIZE and value:  # 0 is invalid, not a limit
                self.maximum_packet_size = value
            elif identifier == TOPIC_ALIAS_MAXIMUM:
                self.topic_alias_maximum = value
            elif identifier == REQUEST_PROBLEM_INFORMATION:
                self.problem_information = bool(value)
        self.send(connect(uid() if client_id is None else client_id, version=V5, **kwargs))

    def read(self, timeout: float = 2.0) -> Packet:
        packet = super().read(timeout)
        self._check(packet)
        return packet

    def _check(self, p: Packet) -> None:
        # [MQTT-3.1.2-27]
        assert p.size <= self.maximum_packet_size, f"{p!r}: {p.size} bytes"
        if p.type == CONNACK:
            assert self.connack is None, "[MQTT-3.2.0-2] a second CONNACK"
            self.connack = p
            assert p.ack_flags & 0xFE == 0, "[MQTT-3.2.2-1]"
            assert p.reason in CONNACK_CODES, f"[MQTT-3.2.2-8] {p.reason:#x}"
            assert not (p.reason and p.session_present), "[MQTT-3.2.2-6]"
            return
        if p.type != AUTH:
            assert self.connack is not None, f"[MQTT-3.2.0-1] {p!r} before CONNACK"
        if p.type == DISCONNECT:
            assert self.connack.reason < 0x80, "[MQTT-3.14.0-1]"
            assert p.reason in DISCONNECT_CODES, f"[MQTT-3.14.2-1] {p.reason:#x}"
            assert SESSION_EXPIRY_INTERVAL not in p.properties, "[MQTT-3.14.2-2]"
        elif not self.problem_information and p.type != PUBLISH:
            assert REASON_STRING not in p.properties, f"[MQTT-3.1.2-32] {p!r}"
            assert USER_PROPERTY not in p.properties, f"[MQTT-3.1.2-32] {p!r}"
        if p.type == PUBLISH:
            assert p.qos != 3
            assert p.qos or not p.dup, "[MQTT-3.3.1-2]"
            assert not p.qos or p.packet_id, "[MQTT-2.2.1-4]"
            alias = p.prop(TOPIC_ALIAS)
            if alias is not None:  # [MQTT-3.1.2-29] [MQTT-3.1.2-30] [MQTT-3.3.2-11]
                assert 0 < alias <= self.topic_alias_maximum, f"topic alias {alias}"
        elif p.type in (PUBACK, PUBREC):
            assert p.reason in PUBACK_CODES, f"[MQTT-3.4.2-1] [MQTT-3.5.2-1] {p.reason:#x}"
        elif p.type in (PUBREL, PUBCOMP):
            assert p.reason in PUBREL_CODES, f"[MQTT-3.6.2-1] [MQTT-3.7.2-1] {p.reason:#x}"
            assert p.flags == (0x02 if p.type == PUBREL else 0), "[MQTT-3.6.1-1]"
        elif p.type == SUBACK:
            assert set(p.codes) <= SUBACK_CODES, f"[MQTT-3.9.3-2] {p.codes}"
        elif p.type == UNSUBACK:
            assert set(p.codes) <= UNSUBACK_CODES, f"[MQTT-3.11.3-2] {p.codes}"


Open = Callable[[], Client5]
Session = Callable[..., tuple[Client5, Packet]]


@pytest.fixture
def open_client(broker) -> Iterator[Open]:
    clients: list[Client5] = []

    def make() -> Client5:
        client = Client5(broker.port)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def session(open_client: Open) -> Session:
    """Connect and require CONNACK 0x00 [MQTT-3.1.4-5]."""

    def make(client_id: str | None = None, **kwargs) -> tuple[Client5, Packet]:
        client = open_client()
        client.send_connect(client_id, **kwargs)
        connack = client.expect(CONNACK)
        assert connack.reason == 0, f"CONNACK {connack.reason:#x}"
        return client, connack

    return make


def connected(session: Session, client_id: str | None = None, **kwargs) -> Client5:
    return session(client_id, **kwargs)[0]


def sub(
    client: Client, *filters: tuple[str, int], packet_id: int = 1, properties: Props | None = None
) -> list[int]:
    client.send(subscribe(packet_id, list(filters), version=V5, properties=properties))
    suback = client.expect(SUBACK)
    assert suback.packet_id == packet_id
    return suback.codes


def pub(topic: str, payload: bytes = b"", **kwargs) -> bytes:
    return publish(topic, payload, version=V5, **kwargs)


def disconnected(client: Client, *codes: int) -> Packet:
    """The server sends DISCONNECT with one of `codes` and closes [MQTT-4.13.1-1]."""
    seen = client.closed()
    assert seen and seen[-1].type == DISCONNECT, f"no DISCONNECT before close: {seen}"
    assert seen[-1].reason in codes, f"DISCONNECT {seen[-1].reason:#x}, expected {codes}"
    return seen[-1]


def refused(client: Client, *codes: int) -> Packet:
    """The server answers CONNECT with a CONNACK carrying one of `codes`, then closes
    [MQTT-3.2.2-7] [MQTT-4.13.2-1]."""
    seen = client.closed()
    assert [p.type for p in seen] == [CONNACK], seen
    assert seen[0].reason in codes, f"CONNACK {seen[0].reason:#x}, expected {codes}"
    return seen[0]


# -- CONNECT ----------------------------------------------------------------------------------


def test_first_packet_must_be_connect(open_client: Open) -> None:
    """[MQTT-3.1.0-1]: closed, and [MQTT-3.14.0-1] no DISCONNECT without a CONNACK."""
    client = open_client()
    client.send(pub("a/b", b"x"))
    assert client.closed() == []


def test_second_connect_is_a_protocol_error(session: Session) -> None:
    """[MQTT-3.1.0-2]: DISCONNECT 0x82; [MQTT-3.2.0-2] no second CONNACK (checked on read)."""
    client = connected(session)
    client.send(connect(uid(), version=V5))
    disconnected(client, 0x82)


@pytest.mark.parametrize("name, level", [(b"MQTX", 5), (b"MQTT", 6), (b"MQTT", 0)])
def test_protocol_name_and_version(broker, name: bytes, level: int) -> None:
    """[MQTT-3.1.2-1] [MQTT-3.1.2-2]: not accepted; a CONNACK, if any, refuses (0x84, or the
    3.1.1 form 0x01 for a client whose version the server cannot know) and the connection
    closes."""
    client = Client(broker.port, V5)  # unchecked: the answer may be in the 3.1.1 form
    try:
        client.send(connect(uid(), version=V5, name=name, level=level))
        seen = client.closed()
    finally:
        client.close()
    assert len(seen) <= 1 and all(p.type == CONNACK for p in seen), seen
    assert all(p.body[1] in (0x01, 0x84) for p in seen), seen


@pytest.mark.parametrize(
    "kwargs, statement",
    [
        ({"flags": 0xC3}, "[MQTT-3.1.2-3] reserved flag"),
        ({"flags": 0xC2 | 0x04 | 0x18, "will": Will("w", b"x")}, "[MQTT-3.1.2-14] will QoS 3"),
        ({"flags": 0xC2 | 0x10}, "[MQTT-3.1.2-11] [MQTT-3.1.2-13] will QoS without will"),
        ({"flags": 0xC2 | 0x20}, "[MQTT-3.1.2-11] [MQTT-3.1.2-15] will retain without will"),
        ({"flags": 0xC2 | 0x04}, "[MQTT-3.1.2-9] will flag without will topic and payload"),
        ({"username": None, "password": None, "flags": 0xC2}, "[MQTT-3.1.2-19] [-21] absent"),
        ({"tail": b"\x00"}, "[MQTT-3.1.2-18] [MQTT-3.1.2-20] bytes after the payload"),
        ({"client_id": b"\xed\xa0\x80"}, "[MQTT-3.1.3-4] [MQTT-1.5.4-1] client id surrogate"),
        ({"client_id": b"a\x00b"}, "[MQTT-3.1.3-4] [MQTT-1.5.4-2] client id U+0000"),
        ({"username": b"acme/\xc0\x80"}, "[MQTT-3.1.3-10] [MQTT-1.5.4-1] user name overlong"),
        (
            {"properties": [(TOPIC_ALIAS, 1)]},
            "section 2.2.2.2: a property not valid for CONNECT is malformed",
        ),
        (
            {"will": Will("w", b"x", properties=[(SESSION_EXPIRY_INTERVAL, 5)])},
            "section 2.2.2.2: a property not valid for the will is malformed",
        ),
        ({"properties": [(USER_PROPERTY, ("k", b"\xff"))]}, "[MQTT-1.5.7-1] user property"),
    ],
)
def test_malformed_connect(open_client: Open, kwargs: dict, statement: str) -> None:
    """[MQTT-3.1.4-1] and section 4.13: a malformed CONNECT gets CONNACK 0x81, then close."""
    kwargs = dict(kwargs)
    client = open_client()
    client.send_connect(kwargs.pop("client_id", uid()), **kwargs)
    refused(client, 0x81)


@pytest.mark.parametrize(
    "props, statement",
    [
        ([(SESSION_EXPIRY_INTERVAL, 1), (SESSION_EXPIRY_INTERVAL, 2)], "Session Expiry twice"),
        ([(RECEIVE_MAXIMUM, 0)], "Receive Maximum 0"),
        ([(MAXIMUM_PACKET_SIZE, 0)], "Maximum Packet Size 0"),
        ([(REQUEST_PROBLEM_INFORMATION, 2)], "Request Problem Information 2"),
        ([(REQUEST_RESPONSE_INFORMATION, 2)], "Request Response Information 2"),
        ([(TOPIC_ALIAS_MAXIMUM, 1), (TOPIC_ALIAS_MAXIMUM, 1)], "Topic Alias Maximum twice"),
    ],
)
def test_connect_property_protocol_errors(open_client: Open, props: Props, statement: str):
    """Section 3.1.2.11: each of these "is a Protocol Error": CONNACK 0x82, then close."""
    client = open_client()
    client.send_connect(properties=props)
    refused(client, 0x82)


def test_password_without_user_name_is_not_malformed(open_client: Open) -> None:
    """Section 3.1.2.9: 5.0 allows a Password without a User Name; it is not a malformed packet
    (this server requires user names, so it refuses it by policy)."""
    client = open_client()
    client.send_connect(username=None, password=b"pw1")
    code = refused(client, *(CONNACK_CODES - {0x00, 0x81, 0x82})).reason
    assert code >= 0x80


def test_rejected_connect_stops_processing(open_client: Open, session: Session) -> None:
    """[MQTT-3.1.4-6]: nothing after a rejected CONNECT is processed (the retained PUBLISH
    right behind a bad password is not stored); [MQTT-3.2.2-6] [MQTT-3.2.2-7]."""
    topic = f"rejected/{uid()}"
    client = open_client()
    client.send_connect(password=b"wrong")
    client.send(pub(topic, b"x", retain=True))
    refused(client, 0x86, 0x87)
    observer = connected(session)
    sub(observer, (topic, 0))
    assert observer.barrier() == []


def test_zero_length_client_id_is_assigned(session: Session) -> None:
    """[MQTT-3.1.3-6] [MQTT-3.1.3-7] [MQTT-3.2.2-16]: a new, unique Assigned Client Identifier
    in CONNACK (clean start 0 allowed on 5.0)."""
    first = session("", clean=True)[1].prop(ASSIGNED_CLIENT_IDENTIFIER)
    second = session("", clean=False)[1].prop(ASSIGNED_CLIENT_IDENTIFIER)
    assert first and second and first != second


def test_client_id_of_23_alphanumerics_is_allowed(session: Session) -> None:
    """[MQTT-3.1.3-5]"""
    connected(session, ("Zz09" + uid() * 3)[:23])


def test_client_id_takeover(session: Session) -> None:
    """[MQTT-3.1.4-3]: the existing connection gets DISCONNECT 0x8E and is closed;
    [MQTT-3.1.2-5] the new one (clean start 0) resumes the session."""
    client_id = uid()
    first = connected(session, client_id, properties=[(SESSION_EXPIRY_INTERVAL, 60)])
    second, connack = session(client_id, clean=False, properties=[(SESSION_EXPIRY_INTERVAL, 60)])
    disconnected(first, 0x8E)
    assert connack.session_present
    second.send(disconnect(0, properties=[(SESSION_EXPIRY_INTERVAL, 0)]))


def test_keep_alive_one_and_a_half_times(session: Session) -> None:
    """[MQTT-3.1.2-24] [MQTT-3.2.2-22]: no Server Keep Alive, so the client's 1 s stands, and
    silence for 1.5 s closes the connection (a DISCONNECT, if sent, says 0x8D)."""
    client, connack = session(keep_alive=1)
    assert SERVER_KEEP_ALIVE not in connack.properties
    start = time.monotonic()
    seen = client.closed(timeout=4.0)
    assert 1.4 <= time.monotonic() - start <= 3.0
    assert all(p.type == DISCONNECT and p.reason == 0x8D for p in seen), seen


@pytest.fixture(scope="module")
def capped_broker(tmp_path_factory):
    """A broker whose tenant `capped` limits Keep Alive to 1 s."""
    tenants = {
        **TENANTS,
        "capped": {
            "devices": {"d1": {"password": "pw1", "client_ids": "any"}},
            "quota": {"max_keepalive": 1},
        },
    }
    process = start_broker(tmp_path_factory.mktemp("capped"), tenants=tenants)
    yield process
    process.stop()


@pytest.mark.parametrize("keep_alive", [0, 60])
def test_server_keep_alive(capped_broker, keep_alive: int) -> None:
    """Section 3.2.2.3.14 [MQTT-3.2.2-21]: the Server Keep Alive replaces the client's value,
    and the server applies it [MQTT-3.1.2-24]."""
    client = Client5(capped_broker.port)
    try:
        client.send_connect(username="capped/d1", keep_alive=keep_alive)
        connack = client.expect(CONNACK)
        assert (connack.reason, connack.prop(SERVER_KEEP_ALIVE)) == (0, 1)
        start = time.monotonic()
        client.closed(timeout=4.0)
        assert 1.4 <= time.monotonic() - start <= 3.0
    finally:
        client.close()


def test_clean_start_and_session_present(session: Session) -> None:
    """[MQTT-3.2.2-2] clean start 1: 0; [MQTT-3.1.2-6] [MQTT-3.2.2-3] clean start 0 without a
    session: 0; [MQTT-3.1.2-5] with one: 1 and it is resumed; [MQTT-3.1.2-4] clean start 1
    discards it."""
    client_id, topic = uid(), f"present/{uid()}"
    keep = [(SESSION_EXPIRY_INTERVAL, 60)]
    client, connack = session(client_id, clean=True, properties=keep)
    assert not connack.session_present
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=False, properties=keep)
    assert connack.session_present
    sub(client, (topic, 1))
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=False, properties=keep)
    assert connack.session_present
    publisher = connected(session)
    publisher.send(pub(topic, b"resumed"))
    assert client.expect(PUBLISH).payload == b"resumed"
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=True, properties=keep)
    assert not connack.session_present
    publisher.send(pub(topic, b"gone"), pub(topic, b"marker"))
    assert client.barrier() == []
    client.send(disconnect(0, properties=[(SESSION_EXPIRY_INTERVAL, 0)]))


def test_session_expiry(session: Session) -> None:
    """[MQTT-3.1.2-25]: kept after the connection closes while the Session Expiry Interval runs
    (absent means 0: not kept); [MQTT-4.1.0-2] discarded once it has passed."""
    client_id = uid()
    client = connected(session, client_id)
    client.send(disconnect())
    client.closed()
    expiring = [(SESSION_EXPIRY_INTERVAL, 1)]
    client, connack = session(client_id, clean=False, properties=expiring)
    assert not connack.session_present
    client.send(disconnect())
    client.closed()
    client, connack = session(client_id, clean=False, properties=expiring)
    assert connack.session_present
    client.send(disconnect())
    client.closed()
    time.sleep(1.5)
    client, connack = session(client_id, clean=False)
    assert not connack.session_present


def test_disconnect_session_expiry_from_zero_is_a_protocol_error(session: Session) -> None:
    """Section 3.14.2.2.2: Session Expiry 0 at CONNECT, non-zero on DISCONNECT: Protocol Error
    (DISCONNECT 0x82, without Session Expiry [MQTT-3.14.2-2])."""
    client = connected(session)
    client.send(disconnect(0, properties=[(SESSION_EXPIRY_INTERVAL, 30)]))
    disconnected(client, 0x82)


def test_disconnect_may_end_the_session(session: Session) -> None:
    """Section 3.14.2.2.2: a DISCONNECT may set a non-zero expiry to 0, ending the session."""
    client_id = uid()
    client = connected(session, client_id, properties=[(SESSION_EXPIRY_INTERVAL, 60)])
    client.send(disconnect(0, properties=[(SESSION_EXPIRY_INTERVAL, 0)]))
    client.closed()
    assert not session(client_id, clean=False)[1].session_present


def test_request_problem_information_0(session: Session) -> None:
    """[MQTT-3.1.2-32]: with Request Problem Information 0 no Reason String or User Property
    on anything but PUBLISH, CONNACK, DISCONNECT (here refused PUBACK/PUBREC; also checked on
    every read)."""
    client = connected(session, properties=[(REQUEST_PROBLEM_INFORMATION, 0)])
    client.send(pub(f"$denied/{uid()}", b"x", qos=1, packet_id=1))
    puback = client.expect(PUBACK)
    assert puback.reason >= 0x80 and REASON_STRING not in puback.properties
    client.send(pub(f"$denied/{uid()}", b"x", qos=2, packet_id=2))
    pubrec = client.expect(PUBREC)
    assert pubrec.reason >= 0x80 and REASON_STRING not in pubrec.properties


def test_request_response_information_0(session: Session) -> None:
    """[MQTT-3.1.2-31]: no Response Information in CONNACK."""
    _, connack = session(properties=[(REQUEST_RESPONSE_INFORMATION, 0)])
    assert RESPONSE_INFORMATION not in connack.properties


# -- PUBLISH ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, codes, statement",
    [
        (pub("a", b"x", flags=0x06, packet_id=1), (0x81,), "[MQTT-3.3.1-4] QoS 3"),
        (pub("a", b"x", flags=0x08), (0x81, 0x82), "[MQTT-3.3.1-2] DUP on QoS 0"),
        (pub("a/+", b"x"), (0x81, 0x82, 0x90), "[MQTT-3.3.2-2] [MQTT-4.7.0-1] +"),
        (pub("#", b"x"), (0x81, 0x82, 0x90), "[MQTT-3.3.2-2] [MQTT-4.7.0-1] #"),
        (pub("a", b"x", qos=1, packet_id=0), (0x81, 0x82), "[MQTT-2.2.1-3] packet id 0"),
        (pub("", b"x"), (0x82,), "[MQTT-3.3.2-1] empty topic without Topic Alias"),
        (pub(b"a\x00", b"x"), (0x81,), "[MQTT-1.5.4-2] [MQTT-4.7.3-2] U+0000"),
        (pub(b"a/\xed\xbf\xbf", b"x"), (0x81,), "[MQTT-1.5.4-1] surrogate"),
        (pub(b"a/\xe0\x80\xaf", b"x"), (0x81,), "[MQTT-1.5.4-1] overlong"),
        (
            pub("a", b"x", properties=[(SUBSCRIPTION_IDENTIFIER, 1)]),
            (0x81, 0x82),
            "[MQTT-3.3.4-6] Subscription Identifier from a client",
        ),
        (
            pub("a", b"x", properties=[(SESSION_EXPIRY_INTERVAL, 1)]),
            (0x81,),
            "section 2.2.2.2: property not valid for PUBLISH",
        ),
        (
            pub("a", b"x", properties=[(PAYLOAD_FORMAT_INDICATOR, 0)] * 2),
            (0x82,),
            "section 3.3.2.3.2: Payload Format Indicator twice",
        ),
        (
            pub("a", b"x", properties=[(CONTENT_TYPE, b"\xc3")]),
            (0x81,),
            "[MQTT-3.3.2-19] [MQTT-1.5.4-1] Content Type",
        ),
        (
            pub("a", b"x", properties=[(TOPIC_ALIAS, 0)]),
            (0x82, 0x94),
            "[MQTT-3.3.2-8] Topic Alias 0",
        ),
        (
            pub("", b"x", properties=[(TOPIC_ALIAS, 1)]),
            (0x82,),
            "section 3.3.2.3.4: Topic Alias with no mapping and no Topic Name",
        ),
    ],
)
def test_invalid_publish(session: Session, data: bytes, codes: tuple, statement: str) -> None:
    """[MQTT-4.13.1-1]: DISCONNECT with the Reason Code the specification gives, then close."""
    client = connected(session)
    client.send(data)
    disconnected(client, *codes)


def test_topic_alias_above_maximum(session: Session) -> None:
    """[MQTT-3.3.2-9]: a Topic Alias above the server's Topic Alias Maximum: DISCONNECT 0x94."""
    client, connack = session()
    maximum = connack.prop(TOPIC_ALIAS_MAXIMUM, 0)
    client.send(pub("a", b"x", properties=[(TOPIC_ALIAS, maximum + 1)]))
    disconnected(client, 0x94, 0x82)


def test_inbound_topic_alias(session: Session) -> None:
    """[MQTT-3.3.2-12]: every alias 1..Topic Alias Maximum is accepted and maps to its topic;
    [MQTT-3.3.2-7]: mappings are not carried to a new connection."""
    topic = f"alias/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 0))
    client_id = uid()
    client, connack = session(client_id)
    maximum = connack.prop(TOPIC_ALIAS_MAXIMUM, 0)
    assert maximum >= 1
    client.send(
        pub(topic, b"1", properties=[(TOPIC_ALIAS, maximum)]),
        pub("", b"2", properties=[(TOPIC_ALIAS, maximum)]),
        pub(topic, b"marker"),
    )
    assert [(p.topic, p.payload) for p in subscriber.until_marker()] == [
        (topic, b"1"),
        (topic, b"2"),
    ]
    client.send(disconnect())
    client.closed()
    again = connected(session, client_id)
    again.send(pub("", b"3", properties=[(TOPIC_ALIAS, maximum)]))
    disconnected(again, 0x82)


def test_outbound_topic_alias(session: Session) -> None:
    """[MQTT-3.1.2-30]: no Topic Alias to a client that sent no Topic Alias Maximum;
    [MQTT-3.1.2-29] [MQTT-3.3.2-11]: never above the one it sent (checked on every read)."""
    root = f"outalias/{uid()}"
    plain = connected(session)
    aliased = connected(session, properties=[(TOPIC_ALIAS_MAXIMUM, 1)])
    for client in (plain, aliased):
        sub(client, (f"{root}/+", 0))
    publisher = connected(session)
    topics = [f"{root}/a", f"{root}/b"] * 3
    publisher.send(*(pub(t, t.encode()) for t in topics), pub(f"{root}/a", b"marker"))
    assert all(TOPIC_ALIAS not in p.properties for p in plain.until_marker())
    mapping: dict[int, str] = {}
    received = []
    for packet in aliased.until_marker():
        alias = packet.prop(TOPIC_ALIAS)
        if alias is not None and packet.topic:
            mapping[alias] = packet.topic
        received.append(packet.topic or mapping[alias])
    assert received == topics


def test_qos1_flow(session: Session) -> None:
    """[MQTT-4.3.2-4] PUBACK with the packet id (0x00/0x10 [MQTT-3.4.2-1]); [MQTT-4.3.2-5]
    after it the same id is a new publication, DUP or not."""
    topic = f"qos1/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 1))
    publisher = connected(session)
    for payload, dup in ((b"first", False), (b"second", True)):
        publisher.send(pub(topic, payload, qos=1, packet_id=7, dup=dup))
        puback = publisher.expect(PUBACK)
        assert (puback.packet_id, puback.reason) == (7, 0x00)
    publisher.send(pub(topic, b"marker"))
    assert [p.payload for p in subscriber.until_marker()] == [b"first", b"second"]
    publisher.send(pub(f"nobody/{uid()}", b"x", qos=1, packet_id=8))
    assert publisher.expect(PUBACK).reason in (0x00, 0x10)


def test_qos2_flow(session: Session) -> None:
    """[MQTT-4.3.3-8] PUBREC with the id; [MQTT-4.3.3-10] a resent PUBLISH before PUBREL gets
    PUBREC and is not delivered again; [MQTT-4.3.3-11] PUBCOMP for PUBREL; [MQTT-4.3.3-12] then
    the id is new."""
    topic = f"qos2/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 0))
    publisher = connected(session)
    publisher.send(pub(topic, b"once", qos=2, packet_id=9))
    assert publisher.expect(PUBREC).packet_id == 9
    publisher.send(pub(topic, b"once", qos=2, packet_id=9, dup=True))
    assert publisher.expect(PUBREC).packet_id == 9
    publisher.send(ack(PUBREL, 9))
    pubcomp = publisher.expect(PUBCOMP)
    assert (pubcomp.packet_id, pubcomp.reason) == (9, 0)
    publisher.send(pub(topic, b"again", qos=2, packet_id=9))
    assert publisher.expect(PUBREC).packet_id == 9
    publisher.send(ack(PUBREL, 9), pub(topic, b"marker"))
    publisher.expect(PUBCOMP)
    assert [p.payload for p in subscriber.until_marker()] == [b"once", b"again"]


def test_pubrel_for_an_unknown_packet_id(session: Session) -> None:
    """[MQTT-4.3.3-11] [MQTT-3.7.2-1]: PUBCOMP with the same id (0x92 Packet Identifier not
    found is the fitting code)."""
    client = connected(session)
    client.send(ack(PUBREL, 4242))
    pubcomp = client.expect(PUBCOMP)
    assert pubcomp.packet_id == 4242 and pubcomp.reason in (0x00, 0x92)


def test_failed_pubrec_frees_the_packet_id(session: Session) -> None:
    """[MQTT-4.3.3-9]: after a PUBREC of 0x80 or more, the same id is a new publication."""
    topic = f"freed/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 0))
    publisher = connected(session)
    publisher.send(pub(f"$denied/{uid()}", b"x", qos=2, packet_id=5))
    assert publisher.expect(PUBREC).reason >= 0x80
    publisher.send(pub(topic, b"new", qos=2, packet_id=5))
    pubrec = publisher.expect(PUBREC)
    assert (pubrec.packet_id, pubrec.reason) == (5, 0)
    assert subscriber.expect(PUBLISH).payload == b"new"


def test_outbound_qos2_flow(session: Session) -> None:
    """[MQTT-4.3.3-1] [MQTT-4.3.3-2] QoS 2, DUP 0 (not the publisher's [MQTT-3.3.1-3]);
    [MQTT-4.3.3-4] PUBREL with the same id after PUBREC; [MQTT-4.3.3-6] no PUBLISH re-sent;
    [MQTT-4.4.0-1] nothing resent after PUBCOMP."""
    topic = f"out2/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 2))
    publisher = connected(session)
    publisher.send(pub(topic, b"x", qos=2, packet_id=1, dup=True))
    publisher.expect(PUBREC)
    packet = subscriber.expect(PUBLISH)
    assert (packet.qos, packet.dup) == (2, False)
    subscriber.send(ack(PUBREC, packet.packet_id))
    assert subscriber.expect(PUBREL).packet_id == packet.packet_id
    subscriber.send(ack(PUBCOMP, packet.packet_id))
    assert subscriber.barrier() == []


@pytest.mark.parametrize("kind", [PUBACK, PUBREC])
def test_negative_acknowledgement_ends_the_flow(session: Session, kind: int) -> None:
    """[MQTT-4.4.0-2]: after PUBACK/PUBREC 0x80 or more from the client the PUBLISH counts as
    acknowledged: no PUBREL, no retransmission, and its send quota slot is free
    [MQTT-4.9.0-2]."""
    topic = f"nack/{uid()}"
    subscriber = connected(session, properties=[(RECEIVE_MAXIMUM, 1)])
    qos = 1 if kind == PUBACK else 2
    sub(subscriber, (topic, qos))
    publisher = connected(session)
    publisher.send(pub(topic, b"refused", qos=qos, packet_id=1))
    packet = subscriber.expect(PUBLISH)
    assert packet.qos == qos
    subscriber.send(ack(kind, packet.packet_id, 0x80))
    publisher.send(pub(topic, b"next", qos=qos, packet_id=2))
    assert subscriber.expect(PUBLISH).payload == b"next"


@pytest.mark.parametrize("granted, published, received", [(0, 2, 0), (1, 2, 1), (2, 1, 1)])
def test_delivery_qos_is_the_minimum(session: Session, granted, published, received) -> None:
    """[MQTT-3.8.4-8]"""
    topic = f"minqos/{uid()}"
    subscriber = connected(session)
    assert sub(subscriber, (topic, granted)) == [granted]
    publisher = connected(session)
    publisher.send(pub(topic, b"x", qos=published, packet_id=1))
    assert subscriber.expect(PUBLISH).qos == received


def test_overlapping_subscriptions_and_identifiers(session: Session) -> None:
    """[MQTT-3.3.4-2]: the maximum QoS of the matching subscriptions; [MQTT-3.3.4-3]
    [MQTT-3.3.4-4] [MQTT-3.3.4-5]: their Subscription Identifiers, on one copy or each their
    own."""
    root = f"overlap/{uid()}"
    client = connected(session)
    sub(client, (f"{root}/+", 0), properties=[(SUBSCRIPTION_IDENTIFIER, 5)])
    sub(client, (f"{root}/x", 2), packet_id=2, properties=[(SUBSCRIPTION_IDENTIFIER, 300)])
    publisher = connected(session)
    publisher.send(pub(f"{root}/x", b"x", qos=2, packet_id=1))
    publisher.expect(PUBREC)
    publisher.send(ack(PUBREL, 1), pub(f"{root}/y", b"marker"))
    copies = [p for p in client.until_marker() if p.type == PUBLISH]
    assert max(p.qos for p in copies) == 2
    ids = sorted(i for p in copies for i in p.properties.get(SUBSCRIPTION_IDENTIFIER, []))
    assert ids == [5, 300], ids


def test_properties_are_forwarded_unaltered(session: Session) -> None:
    """[MQTT-3.3.2-4] Payload Format Indicator, [MQTT-3.3.2-15] Response Topic, [MQTT-3.3.2-16]
    Correlation Data, [MQTT-3.3.2-17] [MQTT-3.3.2-18] User Properties in order,
    [MQTT-3.3.2-20] Content Type."""
    topic = f"props/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 1))
    users = [(USER_PROPERTY, ("b", "2")), (USER_PROPERTY, ("a", "1")), (USER_PROPERTY, ("a", "0"))]
    sent = [
        (PAYLOAD_FORMAT_INDICATOR, 1),
        (RESPONSE_TOPIC, "reply/here"),
        (CORRELATION_DATA, b"\x00\x01corr"),
        *users,
        (CONTENT_TYPE, "text/plain; charset=utf-8"),
    ]
    publisher = connected(session)
    publisher.send(pub(topic, "héllo".encode(), qos=1, packet_id=1, properties=sent))
    packet = subscriber.expect(PUBLISH)
    assert packet.prop(PAYLOAD_FORMAT_INDICATOR) == 1
    assert packet.prop(RESPONSE_TOPIC) == "reply/here"
    assert packet.prop(CORRELATION_DATA) == b"\x00\x01corr"
    assert packet.properties[USER_PROPERTY] == [value for _, value in users]
    assert packet.prop(CONTENT_TYPE) == "text/plain; charset=utf-8"


def test_message_expiry(session: Session) -> None:
    """[MQTT-3.3.2-5]: an expired message is not delivered; [MQTT-3.3.2-6]: the forwarded
    Message Expiry Interval is the received one minus the time it waited."""
    root = f"expiry/{uid()}"
    publisher = connected(session)
    publisher.send(
        pub(f"{root}/short", b"s", retain=True, properties=[(MESSAGE_EXPIRY_INTERVAL, 1)]),
        pub(f"{root}/long", b"l", retain=True, properties=[(MESSAGE_EXPIRY_INTERVAL, 4)]),
    )
    publisher.barrier()
    time.sleep(1.2)
    subscriber = connected(session)
    sub(subscriber, (f"{root}/+", 0))
    got = subscriber.barrier()
    assert [p.payload for p in got] == [b"l"]
    assert got[0].prop(MESSAGE_EXPIRY_INTERVAL) <= 3


# -- retained messages ------------------------------------------------------------------------


def test_retained_set_replace_clear(session: Session) -> None:
    """[MQTT-3.3.1-5] stored and replaced; [MQTT-3.3.1-8] non-retained leaves it;
    [MQTT-3.3.1-6] [MQTT-3.3.1-7] a zero-length one clears it and is not stored."""
    topic = f"retained/{uid()}"
    publisher = connected(session)

    def retained_now() -> list[tuple[bytes, int, bool]]:
        client = connected(session)
        sub(client, (topic, 2))
        found = [(p.payload, p.qos, p.retain) for p in client.barrier()]
        client.close()
        return found

    publisher.send(pub(topic, b"one", qos=1, retain=True, packet_id=1))
    publisher.expect(PUBACK)
    assert retained_now() == [(b"one", 1, True)]
    publisher.send(pub(topic, b"two", retain=True), pub(topic, b"not retained"))
    publisher.barrier()
    assert retained_now() == [(b"two", 0, True)]
    publisher.send(pub(topic, b"", retain=True))
    publisher.barrier()
    assert retained_now() == []


@pytest.mark.parametrize("handling, first, again", [(0, 1, 1), (1, 1, 0), (2, 0, 0)])
def test_retain_handling(session: Session, handling: int, first: int, again: int) -> None:
    """[MQTT-3.3.1-9] 0: retained sent on every SUBSCRIBE; [MQTT-3.3.1-10] 1: only when the
    subscription is new; [MQTT-3.3.1-11] 2: never at subscribe time; [MQTT-3.8.4-4]."""
    topic = f"handling/{uid()}"
    publisher = connected(session)
    publisher.send(pub(topic, b"r", retain=True))
    publisher.barrier()
    client = connected(session)
    sub(client, (topic, options(0, retain_handling=handling)))
    assert len(client.barrier()) == first
    sub(client, (topic, options(0, retain_handling=handling)), packet_id=2)
    assert len(client.barrier()) == again


@pytest.mark.parametrize("rap", [False, True])
def test_retain_as_published(session: Session, rap: bool) -> None:
    """[MQTT-3.3.1-12] Retain As Published 0: RETAIN 0 on forwarded messages;
    [MQTT-3.3.1-13] 1: RETAIN as published."""
    topic = f"rap/{uid()}"
    client = connected(session)
    sub(client, (topic, options(0, retain_as_published=rap)))
    publisher = connected(session)
    publisher.send(pub(topic, b"r", retain=True), pub(topic, b"n"))
    first, second = client.expect(PUBLISH), client.expect(PUBLISH)
    assert (first.retain, second.retain) == (rap, False)


def test_ordered_topic(session: Session) -> None:
    """[MQTT-4.6.0-5] [MQTT-4.6.0-6]: delivered in the order received, per topic and QoS."""
    topic = f"order/{uid()}"
    subscriber = connected(session)
    sub(subscriber, (topic, 1))
    publisher = connected(session)
    count = 100
    publisher.send(
        b"".join(pub(topic, str(i).encode(), qos=1, packet_id=i + 1) for i in range(count)),
        pub(topic, b"marker", qos=1, packet_id=count + 1),
    )
    assert [int(p.payload) for p in subscriber.until_marker()] == list(range(count))


# -- flow control and sizes -------------------------------------------------------------------


def test_receive_maximum_exceeded(session: Session) -> None:
    """Section 3.3.4: more unacknowledged QoS 2 PUBLISHes than the server's Receive Maximum:
    DISCONNECT 0x93."""
    client, connack = session()
    maximum = connack.prop(RECEIVE_MAXIMUM, 65535)
    assert maximum < 65535, "unbounded Receive Maximum cannot be exceeded"
    topic = f"flood/{uid()}"
    client.send(b"".join(pub(topic, b"", qos=2, packet_id=i + 1) for i in range(maximum + 1)))
    disconnected(client, 0x93)


def test_client_receive_maximum(session: Session) -> None:
    """[MQTT-3.3.4-9] [MQTT-4.9.0-2]: at most Receive Maximum unacknowledged QoS 1 PUBLISHes to
    the client; [MQTT-3.3.4-10] [MQTT-4.9.0-3] other packets are not held back meanwhile."""
    topic = f"quota/{uid()}"
    subscriber = connected(session, properties=[(RECEIVE_MAXIMUM, 2)])
    sub(subscriber, (topic, 1))
    publisher = connected(session)
    publisher.send(*(pub(topic, str(i).encode(), qos=1, packet_id=i + 1) for i in range(5)))
    held = [subscriber.expect(PUBLISH), subscriber.expect(PUBLISH)]
    assert subscriber.barrier() == []  # PINGRESP comes; no third PUBLISH
    subscriber.send(ack(PUBACK, held[0].packet_id))
    third = subscriber.expect(PUBLISH)
    assert [p.payload for p in (*held, third)] == [b"0", b"1", b"2"]


def test_packet_larger_than_server_maximum(session: Session) -> None:
    """Section 3.2.2.3.6 [MQTT-3.2.2-15]: a packet above the server's Maximum Packet Size:
    DISCONNECT 0x95 (the fixed header alone tells the size)."""
    client, connack = session()
    maximum = connack.prop(MAXIMUM_PACKET_SIZE)
    assert maximum, "no Maximum Packet Size in CONNACK"
    client.send(bytes((0x30,)) + vbi(maximum) + utf8("big") + b"\x00" + b"x" * 1000)
    disconnected(client, 0x95)


def test_client_maximum_packet_size(session: Session) -> None:
    """[MQTT-3.1.2-27]: nothing above the client's Maximum Packet Size; [MQTT-3.1.2-28] a
    too-large PUBLISH is discarded as if sent (it does not hold a Receive Maximum slot)."""
    topic = f"small/{uid()}"
    client = connected(session, properties=[(MAXIMUM_PACKET_SIZE, 128), (RECEIVE_MAXIMUM, 1)])
    sub(client, (topic, 1))
    publisher = connected(session)
    publisher.send(
        pub(topic, b"x" * 200, qos=1, packet_id=1),
        pub(topic, b"fits", qos=1, packet_id=2),
    )
    assert client.expect(PUBLISH).payload == b"fits"


def test_reason_string_is_dropped_rather_than_exceed_the_maximum(session: Session) -> None:
    """[MQTT-3.14.2-3] [MQTT-3.1.2-27]: a Reason String is left out when the DISCONNECT would
    otherwise exceed the client's Maximum Packet Size (checked on read)."""
    client = connected(session, properties=[(MAXIMUM_PACKET_SIZE, 30)])
    client.send(disconnect(0, properties=[(SESSION_EXPIRY_INTERVAL, 30)]))
    disconnected(client, 0x82)


# -- SUBSCRIBE, UNSUBSCRIBE -------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, codes, statement",
    [
        (frame(8, 0x02, u16(1) + b"\x00"), (0x81, 0x82), "[MQTT-3.8.3-2] no topic filter"),
        (subscribe(1, [("a", 0x40)], version=V5), (0x81,), "[MQTT-3.8.3-5] reserved bit 6"),
        (subscribe(1, [("a", 0x80)], version=V5), (0x81,), "[MQTT-3.8.3-5] reserved bit 7"),
        (subscribe(1, [("a", 0x03)], version=V5), (0x82,), "section 3.8.3.1: QoS 3"),
        (subscribe(1, [("a", 0x30)], version=V5), (0x82,), "section 3.8.3.1: Retain Handling 3"),
        (
            subscribe(1, [("$share/g/a", options(0, no_local=True))], version=V5),
            (0x82,),
            "[MQTT-3.8.3-4] No Local on a Shared Subscription",
        ),
        (subscribe(1, [(b"a\xed\xa0\x80", 0)], version=V5), (0x81,), "[MQTT-3.8.3-1] UTF-8"),
        (subscribe(1, [(b"a\x00", 0)], version=V5), (0x81,), "[MQTT-1.5.4-2] U+0000"),
        (
            subscribe(1, [("a", 0)], version=V5, properties=[(SUBSCRIPTION_IDENTIFIER, 0)]),
            (0x82,),
            "section 3.8.2.1.2: Subscription Identifier 0",
        ),
        (
            subscribe(1, [("a", 0)], version=V5, properties=[(TOPIC_ALIAS, 1)]),
            (0x81,),
            "section 2.2.2.2: property not valid for SUBSCRIBE",
        ),
        (frame(10, 0x02, u16(1) + b"\x00"), (0x81, 0x82), "[MQTT-3.10.3-2] no topic filter"),
        (unsubscribe(1, [b"\xc3("], version=V5), (0x81,), "[MQTT-3.10.3-1] UTF-8"),
    ],
)
def test_invalid_subscribe_or_unsubscribe(session: Session, data, codes, statement) -> None:
    client = connected(session)
    client.send(data)
    disconnected(client, *codes)


@pytest.mark.parametrize(
    "bad_filter",
    ["$share/grp", "$share//t", "$share/g+/t", "$share/g#/t", "$share/g/", "a/#/b", "a+"],
)
def test_invalid_topic_filter(session: Session, bad_filter: str) -> None:
    """[MQTT-4.8.2-1] [MQTT-4.8.2-2] shared subscription syntax, [MQTT-4.7.1-1]
    [MQTT-4.7.1-2] wildcards: never granted: SUBACK 0x8F (or another failure) for that
    filter, or DISCONNECT 0x8F / 0x81 / 0x82."""
    client = connected(session)
    client.send(subscribe(3, [(f"ok/{uid()}", 1), (bad_filter, 1)], version=V5))
    first = client.read()
    if first.type == SUBACK:
        assert (first.packet_id, first.codes[0]) == (3, 1) and first.codes[1] >= 0x80, first
        client.send(pingreq())
        client.expect(PINGRESP)  # and the connection goes on
    else:
        assert first.type == DISCONNECT and first.reason in (0x8F, 0x81, 0x82), first
        assert client.closed() == []


def test_shared_subscription(session: Session) -> None:
    """Section 4.8.2: each message goes to one member of the group; [MQTT-4.8.2-3] with the
    QoS granted to that member."""
    topic, group = f"shared/{uid()}", uid()
    members = [connected(session), connected(session)]
    for member, qos in zip(members, (1, 0), strict=True):
        assert sub(member, (f"$share/{group}/{topic}", qos)) == [qos]
    publisher = connected(session)
    count = 10
    publisher.send(*(pub(topic, str(i).encode(), qos=1, packet_id=i + 1) for i in range(count)))
    for _ in range(count):
        publisher.expect(PUBACK)
    got: list[int] = []
    for member, qos in zip(members, (1, 0), strict=True):
        for packet in member.barrier():
            assert packet.qos == qos
            if qos:
                member.send(ack(PUBACK, packet.packet_id))
            got.append(int(packet.payload))
    assert sorted(got) == list(range(count))


def test_no_local(session: Session) -> None:
    """[MQTT-3.8.3-3]: No Local: the client's own messages are not sent back to it."""
    topic = f"nolocal/{uid()}"
    client = connected(session)
    sub(client, (topic, options(0, no_local=True)))
    client.send(pub(topic, b"own"))
    other = connected(session)
    other.send(pub(topic, b"marker"))
    assert client.until_marker() == []


def test_suback_per_filter_in_order(session: Session) -> None:
    """[MQTT-3.8.4-1] [MQTT-3.8.4-2] SUBACK with the packet id; [MQTT-3.8.4-5] [MQTT-3.8.4-6]
    [MQTT-3.8.4-7] [MQTT-3.9.3-1] one code per filter, in order: the granted QoS."""
    root = f"suback/{uid()}"
    client = connected(session)
    codes = sub(client, (f"{root}/a", 2), (f"{root}/b", 0), (f"{root}/c", 1), packet_id=0xBEEF)
    assert codes == [2, 0, 1]


def test_identical_subscription_is_replaced(session: Session) -> None:
    """[MQTT-3.8.4-3]: replaced (new QoS, still one copy); [MQTT-3.8.4-4] with Retain Handling
    0 the retained message is re-sent."""
    topic = f"replace/{uid()}"
    publisher = connected(session)
    publisher.send(pub(topic, b"retained", retain=True))
    publisher.barrier()
    client = connected(session)
    sub(client, (topic, 0))
    assert [p.payload for p in client.barrier()] == [b"retained"]
    sub(client, (topic, 1), packet_id=2)
    assert [p.payload for p in client.barrier()] == [b"retained"]
    publisher.send(pub(topic, b"live", qos=1, packet_id=1), pub(topic, b"marker"))
    assert [(p.payload, p.qos) for p in client.until_marker()] == [(b"live", 1)]


def test_unsuback(session: Session) -> None:
    """[MQTT-3.10.4-4] [MQTT-3.10.4-5] UNSUBACK with the packet id even when nothing matched;
    [MQTT-3.10.4-6] [MQTT-3.11.3-1] one code per filter, in order (0x11 where none existed);
    [MQTT-3.10.4-1] [MQTT-3.10.4-2] exact comparison, delivery stops."""
    root = f"unsub/{uid()}"
    client = connected(session)
    sub(client, (f"{root}/a", 0), (f"{root}/+", 0), (f"{root}/m", 0))
    client.send(unsubscribe(0x0A0B, [f"{root}/+", f"{root}/#", f"{root}/a"], version=V5))
    unsuback = client.expect(UNSUBACK)
    assert (unsuback.packet_id, unsuback.codes) == (0x0A0B, [0x00, 0x11, 0x00])
    publisher = connected(session)
    publisher.send(pub(f"{root}/a", b"gone"), pub(f"{root}/m", b"marker"))
    assert client.until_marker() == []


@pytest.mark.parametrize(
    "data, statement",
    [
        (ack(PUBREL, 1, flags=0x00), "[MQTT-3.6.1-1] PUBREL"),
        (subscribe(1, [("a", 0)], version=V5, flags=0x00), "[MQTT-3.8.1-1] SUBSCRIBE"),
        (unsubscribe(1, ["a"], version=V5, flags=0x03), "[MQTT-3.10.1-1] UNSUBSCRIBE"),
        (pingreq(flags=0x04), "[MQTT-2.1.3-1] PINGREQ"),
        (ack(PUBACK, 1, flags=0x01), "[MQTT-2.1.3-1] PUBACK"),
        (disconnect(flags=0x02), "[MQTT-3.14.1-1] DISCONNECT"),
        (frame(15, 0x01, b"\x00"), "[MQTT-3.15.1-1] AUTH"),
        (b"\x30\xff\xff\xff\xff\x01", "[MQTT-1.5.5-1] section 2.1.4: Remaining Length > 4 bytes"),
    ],
)
def test_malformed_fixed_header(session: Session, data: bytes, statement: str) -> None:
    """Reserved flag bits with other values (or an impossible Remaining Length): Malformed
    Packet, DISCONNECT 0x81."""
    client = connected(session)
    client.send(data)
    disconnected(client, 0x81)


def test_pingresp(session: Session) -> None:
    """[MQTT-3.12.4-1]"""
    client = connected(session)
    client.send(pingreq())
    assert client.expect(PINGRESP).body == b""


# -- wills, DISCONNECT ------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["network", "0x04", "protocol error"])
def test_will_published(session: Session, ending: str) -> None:
    """[MQTT-3.1.2-8]: published when the connection closes other than by DISCONNECT 0x00;
    [MQTT-3.1.2-16] Will Retain 0: not retained."""
    topic = f"will/{uid()}"
    watcher = connected(session)
    sub(watcher, (topic, 1))
    client = connected(session, will=Will(topic, b"gone", qos=1))
    if ending == "network":
        client.close()
    elif ending == "0x04":
        client.send(disconnect(0x04))
        client.closed()
    else:
        client.send(pub("a/#", b"x"))
        disconnected(client, 0x81, 0x82, 0x90)
    packet = watcher.expect(PUBLISH)
    assert (packet.payload, packet.qos, packet.retain) == (b"gone", 1, False)
    watcher.send(ack(PUBACK, packet.packet_id))
    later = connected(session)
    sub(later, (topic, 0))
    assert later.barrier() == []


def test_will_retain(session: Session) -> None:
    """[MQTT-3.1.2-17]: Will Retain 1: published as a retained message."""
    topic = f"will/{uid()}"
    watcher = connected(session)
    sub(watcher, (topic, 0))
    client = connected(session, will=Will(topic, b"gone", retain=True))
    client.send(disconnect(0x04))
    client.closed()
    assert watcher.expect(PUBLISH).payload == b"gone"
    later = connected(session)
    sub(later, (topic, 0))
    assert [(p.payload, p.retain) for p in later.barrier()] == [(b"gone", True)]


def test_disconnect_0_discards_the_will(session: Session) -> None:
    """[MQTT-3.14.4-3] [MQTT-3.1.2-10]: DISCONNECT 0x00: the will is not published."""
    topic = f"will/{uid()}"
    watcher = connected(session)
    sub(watcher, (topic, 0))
    client = connected(session, will=Will(topic, b"must not appear"))
    client.send(disconnect(0x00))
    client.closed()
    connected(session).send(pub(topic, b"marker"))
    assert watcher.until_marker() == []


def test_will_delay_and_reconnect(session: Session) -> None:
    """[MQTT-3.1.2-26]: a new connection for the session within the Will Delay Interval:
    no will."""
    topic, client_id = f"will/{uid()}", uid()
    watcher = connected(session)
    sub(watcher, (topic, 0))
    will = Will(topic, b"must not appear", properties=[(WILL_DELAY_INTERVAL, 1)])
    keep = [(SESSION_EXPIRY_INTERVAL, 30)]
    client = connected(session, client_id, will=will, properties=keep)
    client.close()
    again, connack = session(client_id, clean=False, properties=keep)
    assert connack.session_present
    time.sleep(1.3)
    connected(session).send(pub(topic, b"marker"))
    assert watcher.until_marker() == []
    again.send(disconnect(0, properties=[(SESSION_EXPIRY_INTERVAL, 0)]))


# -- topics -----------------------------------------------------------------------------------


def test_topic_matching(session: Session) -> None:
    """Section 4.7 (conformance clause 7.1.1 item 2), [MQTT-3.3.2-3]: `sport/#` matches `sport`,
    `+` one (possibly empty) level, case matters [MQTT-4.7.3-4]."""
    cases = [
        ("sport/#", "sport", True),
        ("sport/#", "sport/tennis/player1", True),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("+", "/finance", False),
        ("Sport", "sport", False),
    ]
    root = f"match/{uid()}"
    client = connected(session)
    sub(client, *((f"{root}/{i}/{f}", 0) for i, (f, _, _) in enumerate(cases)), (root, 0))
    publisher = connected(session)
    publisher.send(
        *(pub(f"{root}/{i}/{t}", str(i).encode()) for i, (_, t, _) in enumerate(cases)),
        pub(root, b"marker"),
    )
    got = sorted(int(p.payload) for p in client.until_marker())
    assert got == [i for i, (_, _, match) in enumerate(cases) if match]


def test_dollar_topics_are_not_matched_by_leading_wildcards(session: Session) -> None:
    """[MQTT-4.7.2-1]: `#`, `+/...` and `$share/g/#` do not match `$SYS/...`; `$SYS/#` does."""
    wildcard = connected(session)
    sub(wildcard, ("#", 0), ("+/broker/#", 0), (f"$share/{uid()}/#", 0))
    explicit = connected(session)
    sub(explicit, ("$SYS/#", 0))
    deadline = time.monotonic() + 5
    while True:  # a live $SYS publish, which the wildcard client would get too if matched
        packet = explicit.read(max(0.01, deadline - time.monotonic()))
        if packet.type == PUBLISH and not packet.retain:
            break
    connected(session).send(pub(f"dollar/{uid()}", b"marker"))
    seen = wildcard.until_marker(timeout=5)
    assert not [p.topic for p in seen if p.type == PUBLISH and p.topic.startswith("$")]
