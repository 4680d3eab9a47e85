"""Property tests: every packet type encodes and decodes back to itself, on 3.1.1 and 5.0,
whole, fed byte by byte, or decoded a few packets at a time (`feed`'s limit, `more`)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)

text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
)
level = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/+#"), max_size=8
)
topic = st.lists(level, min_size=1, max_size=4).map("/".join).filter(bool)
topic_filter = st.one_of(
    topic,
    st.lists(st.one_of(level, st.just("+")), min_size=1, max_size=4).map("/".join).filter(bool),
    st.lists(st.one_of(level, st.just("+")), max_size=3).map(lambda ls: "/".join([*ls, "#"])),
)
packet_id = st.integers(1, 65535)
u32 = st.integers(0, 2**32 - 1)
user_properties = st.lists(st.tuples(text, text), max_size=3)


def props(**fields):
    return st.fixed_dictionaries({}, optional={**fields, "user_property": user_properties}).map(
        lambda d: {k: v for k, v in d.items() if v != []}
    )


publish_props = props(
    payload_format_indicator=st.integers(0, 1),
    message_expiry_interval=u32,
    content_type=text,
    response_topic=topic,
    correlation_data=st.binary(max_size=8),
)
ack_props = props(reason_string=text)


@st.composite
def publishes(draw, v5: bool, server_side: bool):
    qos = draw(st.integers(0, 2))
    properties = draw(publish_props) if v5 else {}
    if v5 and not server_side:
        ids = draw(st.lists(st.integers(1, 268_435_455), max_size=2))
        if ids:
            properties["subscription_identifier"] = ids
    return Publish(
        draw(topic),
        draw(st.binary(max_size=64)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(packet_id) if qos else None,
        properties,
    )


@st.composite
def client_packets(draw, v5: bool):
    reason = st.sampled_from([0, 0x10, 0x80, 0x87]) if v5 else st.just(0)
    choice = draw(st.integers(0, 8))
    if choice == 0:
        return draw(publishes(v5, True))
    if choice in (1, 2, 3, 4):
        cls = (PubAck, PubRec, PubRel, PubComp)[choice - 1]
        return cls(draw(packet_id), draw(reason), draw(ack_props) if v5 else {})
    if choice == 5:
        subs = draw(
            st.lists(
                st.builds(
                    Subscription,
                    topic_filter,
                    st.integers(0, 2),
                    st.booleans() if v5 else st.just(False),
                    st.booleans() if v5 else st.just(False),
                    st.integers(0, 2) if v5 else st.just(0),
                ),
                min_size=1,
                max_size=3,
            )
        )
        properties = draw(props(subscription_identifier=st.integers(1, 1000).map(lambda i: [i])))
        return Subscribe(draw(packet_id), subs, properties if v5 else {})
    if choice == 6:
        return Unsubscribe(
            draw(packet_id),
            draw(st.lists(topic_filter, min_size=1, max_size=3)),
            draw(props()) if v5 else {},
        )
    if choice == 7:
        return PingReq()
    if v5:
        return Disconnect(
            draw(st.sampled_from([0, 4, 0x81])),
            draw(props(session_expiry_interval=u32, reason_string=text)),
        )
    return Disconnect()


@st.composite
def connects(draw, v5: bool):
    will = None
    if draw(st.booleans()):
        will_props = draw(props(will_delay_interval=u32, content_type=text)) if v5 else {}
        will = Will(
            draw(topic),
            draw(st.binary(max_size=16)),
            draw(st.integers(0, 2)),
            draw(st.booleans()),
            will_props,
        )
    username = draw(st.one_of(st.none(), text))
    password = (
        draw(st.one_of(st.none(), st.binary(max_size=16))) if (username is not None or v5) else None
    )
    properties = (
        draw(
            props(
                session_expiry_interval=u32,
                receive_maximum=st.integers(1, 65535),
                maximum_packet_size=st.integers(1, 2**32 - 1),
                topic_alias_maximum=st.integers(0, 65535),
            )
        )
        if v5
        else {}
    )
    return Connect(
        draw(text),
        5 if v5 else 4,
        "MQTT",
        draw(st.booleans()),
        draw(st.integers(0, 65535)),
        username,
        password,
        will,
        properties,
    )


@st.composite
def server_packets(draw, v5: bool):
    choice = draw(st.integers(0, 5))
    if choice == 0:
        code = draw(st.sampled_from([0, 0x86, 0x87, 0x97])) if v5 else 0
        properties = (
            draw(
                props(
                    assigned_client_identifier=text,
                    server_keep_alive=st.integers(0, 65535),
                    maximum_qos=st.integers(0, 1),
                    retain_available=st.integers(0, 1),
                )
            )
            if v5
            else {}
        )
        return Connack(draw(st.booleans()), code, properties)
    if choice == 1:
        return draw(publishes(v5, False))
    if choice == 2:
        codes = st.sampled_from([0, 1, 2, 0x80] + ([0x87, 0x97] if v5 else []))
        return SubAck(
            draw(packet_id),
            draw(st.lists(codes, min_size=1, max_size=4)),
            draw(ack_props) if v5 else {},
        )
    if choice == 3:
        if v5:
            return UnsubAck(
                draw(packet_id),
                draw(st.lists(st.sampled_from([0, 0x11]), min_size=1, max_size=3)),
                draw(ack_props),
            )
        return UnsubAck(draw(packet_id), [], {})
    if choice == 4:
        return PingResp()
    if v5:
        return Auth(
            draw(st.sampled_from([0, 0x18])),
            draw(props(authentication_method=text, authentication_data=st.binary(max_size=8))),
        )
    return PingResp()


def _past_limit_by_acks(piece, limit) -> bool:
    """A slice longer than its limit only by short PUBACKs: the limit stops the reader before
    any other packet (a client acknowledges no more than it was sent)."""
    return all(type(packet) is PubAck for packet in piece[limit:])


def roundtrip(packets, version, server_side, connect=None):
    data = b"".join(encode(p, version) for p in packets)
    whole = Reader(server_side=server_side, protocol_version=None if server_side else version)
    prefix = encode(connect, version) if connect else b""
    decoded = whole.feed(prefix + data)
    if connect:
        assert decoded[0] == connect
        decoded = decoded[1:]
    assert decoded == packets
    split = Reader(server_side=server_side, protocol_version=None if server_side else version)
    one_by_one = []
    for index in range(len(prefix + data)):
        one_by_one += split.feed((prefix + data)[index : index + 1])
    assert one_by_one[1 if connect else 0 :] == packets
    sliced = Reader(server_side=server_side, protocol_version=None if server_side else version)
    piece = sliced.feed(prefix + data, 2)
    in_slices = list(piece)
    assert len(piece) <= 2 or _past_limit_by_acks(piece, 2)
    while sliced.more:  # the rest of that one read, two packets at a time
        piece = sliced.feed(b"", 2)
        assert len(piece) <= 2 or _past_limit_by_acks(piece, 2)
        in_slices += piece
    assert in_slices[1 if connect else 0 :] == packets
    # A second read arriving while the first still waits in slices (a WebSocket's frames).
    halves = Reader(server_side=server_side, protocol_version=None if server_side else version)
    middle = len(prefix + data) // 2
    both = halves.feed((prefix + data)[:middle], 1) + halves.feed((prefix + data)[middle:], 1)
    while halves.more:
        both += halves.feed(b"", 1)
    assert both[1 if connect else 0 :] == packets


quick = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@quick
@given(st.data())
def test_client_to_server_packets_roundtrip(data):
    v5 = data.draw(st.booleans())
    connect = data.draw(connects(v5))
    packets = data.draw(st.lists(client_packets(v5), max_size=5))
    roundtrip(packets, 5 if v5 else 4, True, connect)


@quick
@given(st.data())
def test_server_to_client_packets_roundtrip(data):
    v5 = data.draw(st.booleans())
    packets = data.draw(st.lists(server_packets(v5), min_size=1, max_size=5))
    roundtrip(packets, 5 if v5 else 4, False)
