"""Retained messages a tenant deleted through the control plane (`DELETE /api/v1/retained`),
forgotten by this broker: the control plane deletes the rows and announces the topic filter
(`retained.deleted`, common.contracts.notifications); every node of the cluster hears it and drops the
matching messages from its retained store, so that a new subscriber no longer receives them.

Each removal also goes through the retained writer as an empty retained message (the broker's
own way to clear a topic), in order behind the writes it queued before: a message retained just
before the delete, whose row the writer had not written yet when the control plane deleted the
rows, is then deleted too, and the table agrees with what the broker holds.
"""

from __future__ import annotations

from typing import Any

from common.mqtt.errors import TopicFilterInvalid
from common.mqtt.topics import validate_topic_filter
from data_plane.broker.message import Message


def forget_retained(broker: Any, tenant: str, topic_filter: str) -> int:
    """Drop the tenant's retained messages matching `topic_filter` from `broker` (and, through
    its retained storage, from the table); returns how many it held."""
    try:
        validate_topic_filter(topic_filter)
    except TopicFilterInvalid:
        return 0  # the control plane validates it: a malformed one is not ours to guess
    gone = broker.retained.match(tenant, topic_filter)
    storage = getattr(broker, "retained_storage", None)
    for message in gone:
        blank = Message(message.topic, b"", message.qos, True, tenant=tenant)
        broker.retained.set(blank)
        if storage is not None:
            storage.retained_changed(blank)
    return len(gone)
