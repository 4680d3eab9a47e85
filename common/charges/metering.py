"""The metering rules: how many billed message units an MQTT packet costs, in one place.

The broker meters with these functions (`data_plane.broker`: a PUBLISH received, a retained
message stored, each delivery, a CONNECT, a SUBSCRIBE) and `GET /api/v1/usage/explain` answers
with them, so what a tenant is told a message costs is what the broker charges, never a second
copy of the arithmetic.

The units are AWS IoT Core's (https://aws.amazon.com/iot-core/pricing/additional-details/):
a message is metered in 5 KB increments (`MESSAGE_UNIT_BYTES` = 5,120 bytes, at least one unit)
of its payload + topic (UTF-8 bytes) + MQTT 5 properties (as encoded on the wire, without the
property block's own length); a message published with RETAIN is metered for the publish and once
more for the retained copy stored; each copy the broker sends to a subscriber is metered again.
Where the platform differs from AWS it says so (`explain_publish`): acknowledgements are never
billed (AWS bills a PUBACK received from a device), and neither are PINGREQ/PINGRESP, CONNACK,
SUBACK, UNSUBSCRIBE and DISCONNECT, nor the platform's own `$SYS` and `$events` traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.archive.schema import MESSAGE_UNIT_BYTES, message_units
from common.mqtt.properties import encode_properties

__all__ = [
    "CONNECT_UNITS",
    "MESSAGE_UNIT_BYTES",
    "Explanation",
    "explain_publish",
    "message_units",
    "metered_bytes",
    "properties_bytes",
    "retained_store_units",
    "subscribe_units",
]

CONNECT_UNITS = 1  # a CONNECT is one unit, whatever its size


def properties_bytes(properties: dict[str, Any]) -> int:
    """Bytes a message's MQTT 5 properties are metered as: their encoding (identifier, value,
    the length prefixes of strings and binary data, each user property pair), without the
    block's own length. No properties: 0."""
    if not properties:
        return 0
    block = encode_properties(properties)
    n = 1  # the block's length is a variable byte integer: skip it
    while block[n - 1] & 0x80:
        n += 1
    return len(block) - n


def metered_bytes(*, payload: int, topic: int, properties: int = 0) -> int:
    """The metered size of a message: payload + topic (UTF-8) + properties, in bytes."""
    return payload + topic + properties


def retained_store_units(units: int, payload: int) -> int:
    """Units for storing a retained message (`units` of the message itself): metered once more,
    as AWS meters `MQTT RETAINED`; an empty retained payload only clears the topic: free."""
    return units if payload else 0


def subscribe_units(filter_bytes: int) -> int:
    """A SUBSCRIBE is metered on the bytes of its topic filters, in 5 KB units."""
    return message_units(filter_bytes)


@dataclass(frozen=True)
class Explanation:
    """What one PUBLISH of a given shape costs: the total `units`, and each charge with why."""

    units: int
    unit_bytes: int
    metered_bytes: int
    units_per_message: int
    dimensions: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""

    def as_document(self) -> dict[str, Any]:
        return {
            "units": self.units,
            "unit_bytes": self.unit_bytes,
            "metered_bytes": self.metered_bytes,
            "units_per_message": self.units_per_message,
            "dimensions": self.dimensions,
            "why": self.why,
        }


def _plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count:,} {word}"
    return f"{count:,} {word[:-1]}ies" if word.endswith("y") else f"{count:,} {word}s"


def explain_publish(
    *,
    payload: int,
    topic: int = 0,
    properties: int = 0,
    qos: int = 0,
    retain: bool = False,
    deliveries: int = 0,
) -> Explanation:
    """The units one PUBLISH of this shape costs, by the rules the broker meters with: the
    publish received, the retained copy stored (RETAIN with a payload), and each of `deliveries`
    copies sent to subscribers; all in the `messages` dimension."""
    size = metered_bytes(payload=payload, topic=topic, properties=properties)
    each = message_units(size)
    stored = retained_store_units(each, payload) if retain else 0
    sent = each * deliveries
    parts = [
        {
            "dimension": "messages",
            "charge": "publish",
            "count": 1,
            "units": each,
            "why": (
                f"{size:,} bytes metered (payload {payload:,} + topic {topic:,} + properties "
                f"{properties:,}) in {MESSAGE_UNIT_BYTES:,}-byte units, rounded up, at least one: "
                f"{_plural(each, 'unit')}"
            ),
        }
    ]
    if retain:
        parts.append(
            {
                "dimension": "messages",
                "charge": "retained",
                "count": 1 if stored else 0,
                "units": stored,
                "why": (
                    "a retained message stored is metered once more, like the publish"
                    if stored
                    else "an empty retained payload only clears the topic: nothing stored, free"
                ),
            }
        )
    parts.append(
        {
            "dimension": "messages",
            "charge": "delivery",
            "count": deliveries,
            "units": sent,
            "why": (
                f"each copy sent to a subscriber is metered like the publish: "
                f"{_plural(deliveries, 'delivery')} × {_plural(each, 'unit')}"
            ),
        }
    )
    total = each + stored + sent
    qos_words = (
        "QoS 0: no acknowledgement"
        if qos == 0
        else f"QoS {qos} costs no more: acknowledgements (PUBACK, PUBREC, PUBREL, PUBCOMP) are "
        "not billed here (AWS IoT Core bills a PUBACK received from a device)"
    )
    why = (
        f"{_plural(total, 'unit')} in all: a {size:,}-byte message is "
        f"{_plural(each, 'unit')} of {MESSAGE_UNIT_BYTES:,} bytes; "
        + ("metered for the publish and for the retained copy; " if stored else "")
        + f"{_plural(deliveries, 'delivery')} to subscribers; {qos_words}. "
        "Units are billed as messages, priced by your plan's price book."
    )
    return Explanation(total, MESSAGE_UNIT_BYTES, size, each, parts, why)
