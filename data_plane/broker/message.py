"""An application message as the broker keeps it between publisher and subscribers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from common.charges.metering import message_units, metered_bytes, properties_bytes
from common.mqtt.packets import Properties


@dataclass(frozen=True, slots=True, eq=False)
class Origin:
    """Who publishes on a connection: tenant, client id and device, settled at CONNACK. One object
    per connection, compared and hashed by identity: the archive records its values once per
    batch and an index per message (`data_plane.storage.archive_columns`). Immutable, so every
    message carrying it has exactly these values; a reconnection or a takeover gets a new one."""

    tenant: str
    client_id: str
    device: str


@dataclass(slots=True)
class Message:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Properties = field(default_factory=dict)  # application properties only
    expires_at: float | None = None  # time.monotonic() deadline from message_expiry_interval
    publisher: str = ""  # client id of the publishing session (for no-local)
    tenant: str = ""
    device: str = ""  # the publishing device (username `tenant/device`), for the archive
    units: int = 0  # billable 5 KiB message units, set once when the broker routes it
    # The publishing connection's `Origin` (tenant, publisher and device are its values); None
    # for messages the broker makes or restores (wills, $SYS, ...). Not part of equality. The
    # archive records the origin's values for a message that carries one: a copy re-addressed
    # to another tenant, client id or device must not carry it.
    origin: Origin | None = field(default=None, compare=False, repr=False)
    # Where the cluster says it was published, while it is being routed: (node, that node's count
    # of publishes) — a moved session's copies are told apart by it (data_plane.cluster.exactly).
    cluster_origin: tuple[str, int] | None = field(default=None, compare=False, repr=False)

    def billable_units(self) -> int:
        """AWS IoT Core's message units of this message (computed once, then kept)."""
        units = self.units
        if not units:
            units = self.units = message_units(metered_size(self))
        return units

    @classmethod
    def from_publish(
        cls,
        tenant: str,
        publisher: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties,
        device: str = "",
        origin: Origin | None = None,
    ) -> Message:
        """A client's PUBLISH as a message; `origin`, when given, holds `tenant`, `publisher`
        and `device` (the connection's `PublishAdmission` passes its own)."""
        if not properties:  # the common case: nothing to filter
            return cls(topic, payload, qos, retain, {}, None, publisher, tenant, device, 0, origin)
        props = {
            k: v
            for k, v in properties.items()
            if k not in ("topic_alias", "subscription_identifier", "will_delay_interval")
        }
        expiry = props.get("message_expiry_interval")
        expires_at = time.monotonic() + expiry if expiry is not None else None
        return cls(
            topic, payload, qos, retain, props, expires_at, publisher, tenant, device, 0, origin
        )

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (now or time.monotonic()) >= self.expires_at

    def delivery_properties(self, now: float | None = None) -> Properties:
        """Properties for a delivery: the message expiry set to the time that remains."""
        if self.expires_at is None:
            return self.properties
        props = dict(self.properties)
        props["message_expiry_interval"] = max(0, int(self.expires_at - (now or time.monotonic())))
        return props


def metered_size(message: Message) -> int:
    """Bytes AWS IoT Core meters for a message: payload + topic + properties, as on the wire
    (`common.charges.metering`, the rules `GET /api/v1/usage/explain` answers with). Messages without
    properties (the common case) encode nothing; those with some are encoded once per message
    (`billable_units` keeps the result)."""
    topic = message.topic
    return metered_bytes(
        payload=len(message.payload),
        topic=len(topic) if topic.isascii() else len(topic.encode()),
        properties=properties_bytes(message.properties) if message.properties else 0,
    )
