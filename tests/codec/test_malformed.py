"""A corpus of malformed input: each must raise the error (and reason code) the spec calls for."""

import pytest

from common.mqtt.codec import Reader, encode
from common.mqtt.errors import MQTTError, PacketTooLarge, UnsupportedProtocolVersion
from common.mqtt.packets import Connect
from common.mqtt.topics import parse_shared, topic_matches, validate_topic_filter


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def frame(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes((first, len(body))) + body


V5_CONNECT = encode(Connect("c", 5), 5)
V3_CONNECT = encode(Connect("c", 4), 4)

CASES = [
    # (name, version, bytes after CONNECT (or the CONNECT itself when version is None), code)
    ("first packet not CONNECT", None, frame(0xC0, b""), 0x82),
    ("protocol name unknown", None, frame(0x10, s("MQTX") + b"\x04\x02\x00\x3c" + s("c")), 0x82),
    ("CONNECT reserved flag", None, frame(0x10, s("MQTT") + b"\x04\x03\x00\x3c" + s("c")), 0x81),
    (
        "will QoS 3",
        None,
        frame(0x10, s("MQTT") + b"\x04\x1e\x00\x3c" + s("c") + s("t") + s("p")),
        0x81,
    ),
    ("will retain without will", None, frame(0x10, s("MQTT") + b"\x04\x22\x00\x3c" + s("c")), 0x81),
    (
        "3.1.1 password without username",
        None,
        frame(0x10, s("MQTT") + b"\x04\x42\x00\x3c" + s("c") + s("pw")),
        0x81,
    ),
    (
        "client id not UTF-8",
        None,
        frame(0x10, s("MQTT") + b"\x04\x02\x00\x3c" + s(b"\xc3\x28")),
        0x81,
    ),
    (
        "client id with U+0000",
        None,
        frame(0x10, s("MQTT") + b"\x04\x02\x00\x3c" + s("a\x00")),
        0x81,
    ),
    (  # what the presence, usage, queue and journey writers take is checked here (issue 44)
        "client id with a UTF-16 surrogate (CESU)",
        None,
        frame(0x10, s("MQTT") + b"\x04\x02\x00\x3c" + s(b"a\xed\xa0\x80")),
        0x81,
    ),
    (
        "bytes after CONNECT payload",
        None,
        frame(0x10, s("MQTT") + b"\x04\x02\x00\x3c" + s("c") + b"x"),
        0x81,
    ),
    ("second CONNECT", 4, V3_CONNECT, 0x82),
    ("PUBLISH QoS 3", 4, frame(0x36, s("t") + b"\x00\x01"), 0x81),
    ("DUP on QoS 0", 4, frame(0x38, s("t")), 0x81),
    ("packet id 0", 4, frame(0x32, s("t") + b"\x00\x00"), 0x82),
    ("wildcard in topic name", 4, frame(0x30, s("a/+")), 0x90),
    ("empty topic on 3.1.1", 4, frame(0x30, s("")), 0x82),
    ("topic not UTF-8", 4, frame(0x30, s(b"\xff")), 0x81),
    ("PUBACK flags", 4, frame(0x41, b"\x00\x01"), 0x81),
    ("PUBREL flags", 4, frame(0x60, b"\x00\x01"), 0x81),
    ("PUBACK packet id 0", 4, frame(0x40, b"\x00\x00"), 0x82),
    # The reader's fast paths (a 4-byte PUBACK, a PUBLISH after CONNECT) keep these errors.
    ("PUBACK before CONNECT", None, frame(0x40, b"\x00\x01"), 0x82),
    ("v5 PUBACK packet id 0", 5, frame(0x40, b"\x00\x00"), 0x82),
    ("PUBLISH before CONNECT", None, frame(0x30, s("t")), 0x82),
    ("PUBLISH topic length past packet", 4, frame(0x30, b"\x00\x05t"), 0x81),
    ("PUBLISH one byte", 4, frame(0x30, b"\x00"), 0x81),
    ("PUBLISH QoS 1 without packet id", 4, frame(0x32, s("t") + b"\x00"), 0x81),
    ("PUBLISH topic with U+0000", 4, frame(0x30, s("a\x00")), 0x81),
    ("SUBSCRIBE flags", 4, frame(0x80, b"\x00\x01" + s("t") + b"\x00"), 0x81),
    ("SUBSCRIBE without filters", 4, frame(0x82, b"\x00\x01"), 0x82),
    ("SUBSCRIBE QoS 3", 4, frame(0x82, b"\x00\x01" + s("t") + b"\x03"), 0x81),
    ("SUBSCRIBE 3.1.1 reserved option bits", 4, frame(0x82, b"\x00\x01" + s("t") + b"\x04"), 0x81),
    ("filter # not last", 4, frame(0x82, b"\x00\x01" + s("a/#/b") + b"\x00"), 0x8F),
    ("filter + not whole level", 4, frame(0x82, b"\x00\x01" + s("a/b+") + b"\x00"), 0x8F),
    ("shared without filter", 4, frame(0x82, b"\x00\x01" + s("$share/g") + b"\x00"), 0x8F),
    ("UNSUBSCRIBE without filters", 4, frame(0xA2, b"\x00\x01"), 0x82),
    ("PINGREQ with body", 4, frame(0xC0, b"\x00"), 0x81),
    ("3.1.1 DISCONNECT with body", 4, frame(0xE0, b"\x00"), 0x81),
    ("AUTH on 3.1.1", 4, frame(0xF0, b"\x00\x00"), 0x82),
    ("server packet from a client", 4, frame(0x20, b"\x00\x00"), 0x82),
    ("reserved packet type 0", 4, frame(0x00, b""), 0x81),
    ("v5 SUBSCRIBE QoS 3", 5, frame(0x82, b"\x00\x01\x00" + s("t") + b"\x03"), 0x82),
    ("v5 retain handling 3", 5, frame(0x82, b"\x00\x01\x00" + s("t") + b"\x30"), 0x82),
    ("v5 option reserved bits", 5, frame(0x82, b"\x00\x01\x00" + s("t") + b"\x40"), 0x81),
    ("v5 no local on shared", 5, frame(0x82, b"\x00\x01\x00" + s("$share/g/t") + b"\x04"), 0x82),
    ("v5 unknown property", 5, frame(0x30, s("t") + b"\x02\x7f\x00"), 0x81),
    (
        "v5 property not allowed on PUBLISH",
        5,
        frame(0x30, s("t") + b"\x05\x11\x00\x00\x00\x01"),
        0x81,
    ),
    ("v5 duplicate property", 5, frame(0x30, s("t") + b"\x04\x01\x00\x01\x01"), 0x82),
    ("v5 payload format 2", 5, frame(0x30, s("t") + b"\x02\x01\x02"), 0x82),
    ("v5 topic alias 0", 5, frame(0x30, s("t") + b"\x03\x23\x00\x00"), 0x82),
    ("v5 client sends subscription id", 5, frame(0x30, s("t") + b"\x02\x0b\x01"), 0x82),
    ("v5 empty topic without alias", 5, frame(0x30, s("") + b"\x00"), 0x82),
    ("v5 property length past packet", 5, frame(0x30, s("t") + b"\x09\x01\x00"), 0x81),
    ("v5 subscription id 0", 5, frame(0x82, b"\x00\x01\x02\x0b\x00" + s("t") + b"\x00"), 0x82),
    ("v5 truncated varint", 5, frame(0x30, s("t") + b"\x80"), 0x81),
]


@pytest.mark.parametrize("name, version, data, code", CASES, ids=[c[0] for c in CASES])
def test_malformed(name, version, data, code):
    reader = Reader(server_side=True)
    if version is not None:
        reader.feed(V5_CONNECT if version == 5 else V3_CONNECT)
    with pytest.raises(MQTTError) as raised:
        reader.feed(data)
    assert raised.value.reason_code == code, raised.value
    with pytest.raises(MQTTError):  # a failed reader stays failed
        reader.feed(b"\xc0\x00")


def test_acks_and_publishes_split_anywhere_decode_alike():
    """The fast paths see packets whole in one read or cut at any byte, between other packets."""
    acks = b"".join(frame(0x40, i.to_bytes(2, "big")) for i in (1, 2, 65535))
    kinds = ["PubAck"] * 3 + ["Publish", "PubAck", "PingReq"]
    for connect, properties in ((V3_CONNECT, b""), (V5_CONNECT, b"\x00")):
        publish = frame(0x32, s("a/b") + b"\x00\x07" + properties + b"payload")
        stream = acks + publish + frame(0x40, b"\x00\x09") + frame(0xC0, b"")
        expected = Reader().feed(connect + stream)[1:]
        for cut in range(1, len(stream)):
            reader = Reader()
            reader.feed(connect)
            assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == expected, cut
            reader = Reader()  # reads that are no `bytes` (a WebSocket's frames) are buffered
            reader.feed(bytearray(connect))
            first, rest = memoryview(stream[:cut]), bytearray(stream[cut:])
            got = reader.feed(first) + reader.feed(rest)
            assert got == expected and type(got[3].payload) is bytes, cut
        assert [type(p).__name__ for p in expected] == kinds
        assert expected[3].payload == b"payload" and expected[3].packet_id == 7
        assert [p.packet_id for p in expected[:3]] == [1, 2, 65535]
        assert expected[0].reason_code == 0 and expected[0].properties == {}


def test_remaining_length_over_four_bytes():
    reader = Reader()
    with pytest.raises(MQTTError) as raised:
        reader.feed(b"\x10\xff\xff\xff\xff\x01")
    assert raised.value.reason_code == 0x81


def test_oversized_packet_refused_from_its_header():
    reader = Reader(max_packet_size=1000)
    reader.feed(V3_CONNECT)
    with pytest.raises(PacketTooLarge):
        reader.feed(b"\x30\xe8\x07")  # declares 1000 bytes of body; nothing else has arrived


def test_unsupported_protocol_level():
    with pytest.raises(UnsupportedProtocolVersion):
        Reader().feed(frame(0x10, s("MQTT") + b"\x06\x02\x00\x3c" + s("c")))


def test_mqisdp_3_1_is_accepted_as_3_1_1():
    (connect,) = Reader().feed(frame(0x10, s("MQIsdp") + b"\x03\x02\x00\x3c" + s("c")))
    assert connect.client_id == "c" and connect.protocol_version == 4


@pytest.mark.parametrize(
    "topic_filter, topic, matches",
    [
        ("sport/#", "sport", True),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("#", "$SYS/x", False),
        ("+/monitor", "$SYS/monitor", False),
        ("$SYS/#", "$SYS/x", True),
        ("a/+/c", "a/b/c/d", False),
        ("a/b", "a/b", True),
        ("/+", "/x", True),
    ],
)
def test_topic_matching(topic_filter, topic, matches):
    assert topic_matches(topic_filter, topic) is matches


def test_shared_filters():
    assert parse_shared("$share/g/a/+") == ("g", "a/+")
    assert parse_shared("a/b") == (None, "a/b")
    for bad in ("$share//a", "$share/g+/a", "$share/g/"):
        with pytest.raises(MQTTError):
            parse_shared(bad)
    with pytest.raises(MQTTError):
        validate_topic_filter("")
