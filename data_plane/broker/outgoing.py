"""A delivery as the PUBLISH bytes its client receives: the client's protocol version, its
topic aliases (`aliases`), the message's 5.0 properties and subscription identifiers, within
the client's Maximum Packet Size. Pure: it reads what the client negotiated, writes nothing
(a new topic alias is the caller's to record once the bytes went out: `Wire`'s second item)."""

from __future__ import annotations

from typing import Protocol

from common.mqtt.codec import encode_publish
from common.mqtt.packets import MQTT_5_0
from common.mqtt.properties import encode_properties
from data_plane.broker.message import Message
from data_plane.broker.ports import Outlet


class Outgoing(Protocol):
    """What of a delivery goes on the wire (`session.Delivery`)."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]


# The PUBLISH, and the topic alias it sets (the client knows it once the bytes are sent). A plain
# tuple: built once per delivery, where a NamedTuple's Python-level constructor cost ~6 % of the
# publish path's instructions (callgrind, bench.publish_micro with ten tenants).
Wire = tuple[bytes, int | None]


def encode_delivery(
    conn: Outlet, delivery: Outgoing, packet_id: int | None, dup: bool
) -> Wire | None:
    """The PUBLISH for `delivery`, or None when it is larger than the client accepts (the
    caller skips it, as the spec says [MQTT-3.1.2-25])."""
    message = delivery.message
    version = conn.protocol_version
    topic = message.topic
    properties = b""
    new_alias = None
    if version == MQTT_5_0:
        props = message.delivery_properties()
        if delivery.subscription_ids:
            props = dict(props, subscription_identifier=list(delivery.subscription_ids))
        alias = conn.outbound_alias(topic)
        if alias is not None:
            alias_id, known = alias
            props = dict(props, topic_alias=alias_id)
            if known:
                topic = ""
            else:
                new_alias = alias_id
        properties = encode_properties(props) if props else b"\x00"
    data = encode_publish(
        topic.encode(),
        message.payload,
        delivery.qos,
        delivery.retain,
        dup,
        packet_id,
        properties,
        version,
    )
    if len(data) > conn.client_maximum_packet_size:
        return None
    return data, new_alias
