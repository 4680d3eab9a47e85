"""Known MQTT traffic through a real broker process, and the units AWS IoT Core would meter for it.

Sizes are payload + topic (no properties are sent): the topics are 3 characters, so a 1,000-byte
payload meters 1,003 bytes = 1 unit, 6,000 → 2 units, 12,000 → 3 units (5,120-byte increments).
Three connections of a few seconds each are 3 connection-minutes: each is rounded up on its own
(a connection held across minutes is charged every minute it stays open: the unit tests in
tests/billing/test_metering_units.py show that with a clock of their own, not a minute of waiting).
"""

from __future__ import annotations

from common.archive.schema import message_units
from tests.broker.clients import Paho

PAYLOAD_SIZES = (1_000, 6_000, 12_000)


def expected_units() -> dict[str, int]:
    """What the traffic of `run_known_traffic` costs, computed from the rules (not the broker)."""
    publish = [message_units(size + 3) for size in PAYLOAD_SIZES]  # 1, 2, 3
    retained = message_units(6_000 + 3)  # 2
    connects = 3  # publisher, subscriber, the third one
    subscribe = message_units(len("t/#"))  # one SUBSCRIBE packet, 1 unit
    received = sum(publish) + retained
    delivered = sum(publish) + retained  # the subscriber gets every one of them
    stored = retained  # the retained message is stored once
    return {
        "messages": connects + subscribe + received + delivered + stored,
        "connection_minutes": 1 + 1 + 1,  # three short connections, each rounded up alone
        "publishes_in": len(PAYLOAD_SIZES) + 1,
        "deliveries_out": len(PAYLOAD_SIZES) + 1,
    }


def run_known_traffic(port: int, secret: str, tenant: str = "acme", device: str = "d") -> None:
    user = f"{tenant}/{device}"
    third = Paho(port, user, secret, "held")
    subscriber = Paho(port, user, secret, "sub")
    subscriber.subscribe("t/#", 1)
    publisher = Paho(port, user, secret, "pub")
    for size in PAYLOAD_SIZES:
        publisher.publish("t/x", b"x" * size, 1)
    publisher.publish("t/r", b"r" * 6_000, 1, retain=True)
    assert len(subscriber.expect(4, 10)) == 4
    publisher.close()
    subscriber.close()
    third.close()
