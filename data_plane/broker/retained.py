"""Retained messages, per tenant: set, replace, clear with an empty payload, match by filter."""

from __future__ import annotations

from data_plane.broker.message import Message
from data_plane.mqtt.topics import topic_matches


class RetainedStore:
    def __init__(self) -> None:
        self._tenants: dict[str, dict[str, Message]] = {}

    def set(self, message: Message) -> None:
        topics = self._tenants.setdefault(message.tenant, {})
        if message.payload:
            topics[message.topic] = message
        else:
            topics.pop(message.topic, None)

    def count(self, tenant: str) -> int:
        return len(self._tenants.get(tenant, ()))

    def has(self, tenant: str, topic: str) -> bool:
        return topic in self._tenants.get(tenant, ())

    def match(self, tenant: str, topic_filter: str) -> list[Message]:
        topics = self._tenants.get(tenant)
        if not topics:
            return []
        if "+" not in topic_filter and "#" not in topic_filter:
            found = topics.get(topic_filter)
            return [found] if found and not found.expired() else []
        out = []
        for topic, message in list(topics.items()):
            if topic_matches(topic_filter, topic):
                if message.expired():
                    del topics[topic]
                else:
                    out.append(message)
        return out
