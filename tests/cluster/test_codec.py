"""Forwarded batches decode to the messages that were encoded (unit test, no processes): any
message a client may publish, every MQTT 5 publish property over its whole range (issue 28,
point 6: a Message Expiry Interval of 2^31 s or more raised struct.error)."""

from __future__ import annotations

import struct

from hypothesis import example, given
from hypothesis import strategies as st

from data_plane.broker.message import Message
from data_plane.cluster import codec

NOW = 1000.0  # the encoding and decoding node's clock, in these tests
MAX_STRING = 65_535  # bytes of an MQTT UTF-8 string or binary data
U32 = 2**32 - 1

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
long_text = "é" * (MAX_STRING // 2) + "x"  # 65,535 bytes of UTF-8, the longest MQTT string
publish_properties = st.fixed_dictionaries(
    {},
    optional={
        "payload_format_indicator": st.integers(0, 1),
        "message_expiry_interval": st.integers(0, U32),
        "content_type": texts,
        "response_topic": texts.filter(bool),
        "correlation_data": st.binary(max_size=64),
        "user_property": st.lists(st.tuples(texts, texts), min_size=1, max_size=4),
    },
)
flags = st.sampled_from([codec.DELIVER, codec.RETAIN, codec.TARGET, codec.GROUPS]).flatmap(
    lambda one: st.integers(0, 15).map(lambda more: one | more)
)
groups = st.lists(st.tuples(texts.filter(bool), texts.filter(bool)), max_size=3, unique=True)


def message_of(topic, payload, qos, retain, properties, publisher, tenant, device, units):
    """A message as `Message.from_publish` makes one: its deadline from its expiry interval."""
    expiry = properties.get("message_expiry_interval")
    expires_at = NOW + expiry if expiry is not None else None
    return Message(
        topic, payload, qos, retain, properties, expires_at, publisher, tenant, device, units
    )


@given(
    topic=texts.filter(bool),
    payload=st.binary(max_size=2000),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    properties=publish_properties,
    publisher=texts,
    tenant=texts,
    device=texts,
    units=st.integers(0, U32),
    flag=flags,
    served=groups,
    seq=st.integers(0, 2**64 - 1),
    elapsed=st.floats(0, 10),
)
@example(  # every field at the widest MQTT allows
    topic=long_text,
    payload=b"\xff" * 70_000,
    qos=2,
    retain=True,
    properties={
        "payload_format_indicator": 1,
        "message_expiry_interval": U32,
        "content_type": long_text,
        "response_topic": long_text,
        "correlation_data": b"\x01" * MAX_STRING,
        "user_property": [(long_text, long_text), ("k", "")],
    },
    publisher=long_text,
    tenant="acme",
    device="d1",
    units=U32,
    flag=15,
    served=[(long_text, long_text)],
    seq=2**64 - 1,
    elapsed=0.0,
)
@example(  # the first expiry the old head could not hold
    topic="t",
    payload=b"",
    qos=1,
    retain=False,
    properties={"message_expiry_interval": 2**31 // 1000 + 1},
    publisher="c",
    tenant="acme",
    device="d1",
    units=1,
    flag=codec.DELIVER,
    served=[],
    seq=1,
    elapsed=0.0,
)
def test_any_message_round_trips(
    topic,
    payload,
    qos,
    retain,
    properties,
    publisher,
    tenant,
    device,
    units,
    flag,
    served,
    seq,
    elapsed,
):
    message = message_of(topic, payload, qos, retain, properties, publisher, tenant, device, units)
    if message.expires_at is not None:  # forwarded a while after it came in
        message.expires_at -= min(elapsed, properties["message_expiry_interval"])
    other = Message("t/2", b"second", 1, False, tenant=tenant)
    batch = codec.encode(message, flag, tuple(served), now=NOW, seq=seq) + codec.encode(
        other, codec.RETAIN, now=NOW
    )
    (f1, m1, g1, s1), (f2, m2, g2, s2) = codec.decode_counted(batch, now=NOW)
    assert (f1, g1, s1) == (flag, frozenset(served), seq)
    assert (f2, g2, s2) == (codec.RETAIN, frozenset(), 0)
    expected_deadline = message.expires_at
    assert m1 == Message(
        topic, payload, qos, retain, properties, m1.expires_at, publisher, tenant, device, units
    )
    if expected_deadline is None:
        assert m1.expires_at is None
    else:  # the time that remains travels in whole milliseconds
        assert expected_deadline - 0.001 <= m1.expires_at <= expected_deadline
    assert (m2.topic, m2.payload, m2.qos, m2.expires_at) == ("t/2", b"second", 1, None)


def test_an_ordinary_message_keeps_the_layout_nodes_of_the_version_before_read():
    """Only a message the old head cannot hold is written wide: a rolling upgrade keeps
    forwarding everything else between old and new nodes."""
    message = Message("t", b"p", 1, True, {"message_expiry_interval": 3600}, NOW + 3600, "c")
    data = codec.encode(message, codec.DELIVER, (("t", "g"),), now=NOW, seq=9)
    old_head = struct.Struct("!BBBiIHHHHII")
    flag, qos, retain, expiry_ms, *_ = old_head.unpack_from(data)
    assert (flag, qos, retain, expiry_ms) == (codec.DELIVER, 1, 1, 3_600_000)
    assert data[-8:] == (9).to_bytes(8, "big")
    long = Message("t", b"p", 1, True, {"message_expiry_interval": U32}, NOW + U32, "c")
    assert codec.encode(long, codec.DELIVER, now=NOW)[0] == codec.DELIVER | codec.WIDE


def test_more_groups_than_a_two_byte_count_holds():
    served = tuple((f"f/{i}", f"g{i}") for i in range(70_000))
    data = codec.encode(Message("f/1", b"x", 0, False), codec.GROUPS, served, now=NOW, seq=3)
    ((flag, message, decoded, seq),) = codec.decode_counted(data, now=NOW)
    assert (flag, message.topic, seq) == (codec.GROUPS, "f/1", 3)
    assert decoded == frozenset(served)
