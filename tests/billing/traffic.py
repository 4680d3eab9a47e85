"""Known MQTT traffic through a real broker process, and the units AWS IoT Core would meter for it.

Sizes are payload + topic (no properties are sent): the topics are 3 characters, so a 1,000-byte
payload meters 1,003 bytes = 1 unit, 6,000 → 2 units, 12,000 → 3 units (5,120-byte increments).
"""

from __future__ import annotations

import time

from common.archive_schema import message_units
from tests.broker.clients import Paho

PAYLOAD_SIZES = (1_000, 6_000, 12_000)
HELD_SECONDS = 61  # the long connection: 61 s open = 2 connection-minutes (rounded up)


def expected_units() -> dict[str, int]:
    """What the traffic of `run_known_traffic` costs, computed from the rules (not the broker)."""
    publish = [message_units(size + 3) for size in PAYLOAD_SIZES]  # 1, 2, 3
    retained = message_units(6_000 + 3)  # 2
    connects = 3  # publisher, subscriber, the long one
    subscribe = message_units(len("t/#"))  # one SUBSCRIBE packet, 1 unit
    received = sum(publish) + retained
    delivered = sum(publish) + retained  # the subscriber gets every one of them
    stored = retained  # the retained message is stored once
    return {
        "messages": connects + subscribe + received + delivered + stored,
        "connection_minutes": 1 + 1 + 2,  # two short connections, one held 61 s
        "publishes_in": len(PAYLOAD_SIZES) + 1,
        "deliveries_out": len(PAYLOAD_SIZES) + 1,
    }


def run_known_traffic(port: int, secret: str, tenant: str = "acme", device: str = "d") -> None:
    user = f"{tenant}/{device}"
    long_lived = Paho(port, user, secret, "held")
    opened = time.monotonic()
    subscriber = Paho(port, user, secret, "sub")
    subscriber.subscribe("t/#", 1)
    publisher = Paho(port, user, secret, "pub")
    for size in PAYLOAD_SIZES:
        publisher.publish("t/x", b"x" * size, 1)
    publisher.publish("t/r", b"r" * 6_000, 1, retain=True)
    assert len(subscriber.expect(4, 10)) == 4
    publisher.close()
    subscriber.close()
    time.sleep(max(0.0, HELD_SECONDS - (time.monotonic() - opened)))
    long_lived.close()
