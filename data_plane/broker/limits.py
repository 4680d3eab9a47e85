"""The broker's own limits, shared by admission, the handshake and the broker."""

from __future__ import annotations

from collections.abc import Mapping

NEVER_EXPIRES = 0xFFFFFFFF  # a session expiry interval that never runs out
MAX_DELAY = 4_294_967  # seconds a `$delayed/{seconds}/...` publish may wait, as EMQX
# Topics and filters deeper than this are refused (as EMQX's max_topic_levels): matching walks
# levels, and nothing real needs more.
MAX_TOPIC_LEVELS = 128
# The longest client id a CONNECT may use (characters): what every table holding one takes
# (`tenants_deviceconnection.client_id` is varchar(255), the sessions' and queues' 256). MQTT
# allows 65,535 bytes; a longer id made every write batch it joined fail, other tenants' rows
# with it (issue 44). AWS IoT allows 128 bytes.
MAX_CLIENT_ID = 255
# The client ids of shared groups' holders (data_plane.broker.groups): no client may take one.
RESERVED_CLIENT_ID_PREFIX = "$group:"


def client_id_refused(client_id: str) -> str | None:
    """Why a CONNECT may not use `client_id`, or None."""
    if len(client_id) > MAX_CLIENT_ID:  # no table could hold it
        return "client id too long"
    if client_id.startswith(RESERVED_CLIENT_ID_PREFIX):
        return f"client ids starting {RESERVED_CLIENT_ID_PREFIX} are the broker's"
    return None


def too_deep(topic: str) -> bool:
    return topic.count("/") >= MAX_TOPIC_LEVELS


# What a PUBLISH may carry beside its payload, at most, for the Maximum Packet Size that MQTT 5.0
# CONNACK advertises (§3.2.2.3.6): the fixed header (1 byte and a remaining length of up to 4),
# the longest topic name (a 2-byte length and 65,535 bytes), the packet id (2) and properties of up
# to 64 KiB (a length of up to 4 bytes, then user properties, content type, response topic,
# correlation data...). Generous on purpose: a client refuses to send a packet larger than the
# advertised size, so the bound must cover any publish the plan's `max_message_size` lets in;
# only one whose properties alone exceed 64 KiB, with a payload at the limit, would be refused by
# the client though the broker would take it. The broker itself still judges the payload against
# `max_message_size` (admission), whatever size was advertised.
PUBLISH_OVERHEAD = 5 + (2 + 65_535) + 2 + (4 + 65_536)


def maximum_packet_size(broker_maximum: int, quota: Mapping[str, int]) -> int:
    """CONNACK's Maximum Packet Size: the tenant's `max_message_size` plus a publish's overhead,
    never more than the broker reads (`BrokerConfig.max_packet_size`). Without a message size
    limit, the broker's own."""
    limit = quota.get("max_message_size")
    if limit is None:
        return broker_maximum
    return min(broker_maximum, int(limit) + PUBLISH_OVERHEAD)
