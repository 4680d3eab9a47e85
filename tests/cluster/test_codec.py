"""Forwarded batches decode to the messages that were encoded (unit test, no processes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from data_plane.broker.message import Message
from data_plane.cluster import codec

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@given(
    topic=texts.filter(bool),
    payload=st.binary(max_size=2000),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    tenant=texts,
    publisher=texts,
    user=st.lists(st.tuples(texts, texts), max_size=3),
    expiry=st.one_of(st.none(), st.integers(0, 10_000)),
    groups=st.lists(st.tuples(texts.filter(bool), texts.filter(bool)), max_size=3, unique=True),
)
def test_round_trip(topic, payload, qos, retain, tenant, publisher, user, expiry, groups):
    properties = {"user_property": user} if user else {}
    if expiry is not None:
        properties["message_expiry_interval"] = expiry
    now = 1000.0
    message = Message(
        topic,
        payload,
        qos,
        retain,
        properties,
        now + expiry if expiry is not None else None,
        publisher,
        tenant,
        "dev",
        7,
    )
    other = Message("t/2", b"second", 1, False, tenant=tenant)
    batch = codec.encode(message, codec.DELIVER, tuple(groups), now=now) + codec.encode(
        other, codec.RETAIN, now=now
    )
    (f1, m1, g1), (f2, m2, g2) = codec.decode(batch, now=now)
    assert (f1, f2) == (codec.DELIVER, codec.RETAIN)
    assert g1 == frozenset(groups) and g2 == frozenset()
    assert (m1.topic, m1.payload, m1.qos, m1.retain) == (topic, payload, qos, retain)
    assert (m1.tenant, m1.publisher, m1.device, m1.units) == (tenant, publisher, "dev", 7)
    assert m1.properties == properties
    assert m1.expires_at == (now + expiry if expiry is not None else None)
    assert (m2.topic, m2.payload, m2.qos) == ("t/2", b"second", 1)
