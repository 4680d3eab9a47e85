"""Retained messages, per tenant: set, replace, clear with an empty payload, match by filter."""

from __future__ import annotations

from common.mqtt.topics import topic_matches
from data_plane.broker.message import Message


class RetainedStore:
    def __init__(self) -> None:
        self._tenants: dict[str, dict[str, Message]] = {}
        # Per tenant, how many retained topics are the broker's own (`$SYS/...`): the tenant's
        # retained quota counts only its clients' messages.
        self._system: dict[str, int] = {}

    def set(self, message: Message) -> None:
        topics = self._tenants.setdefault(message.tenant, {})
        topic = message.topic
        system = topic[:1] == "$"
        if message.payload:
            if system and topic not in topics:
                self._system[message.tenant] = self._system.get(message.tenant, 0) + 1
            topics[topic] = message
        elif topics.pop(topic, None) is not None and system:
            self._system[message.tenant] -= 1

    def count(self, tenant: str) -> int:
        """The tenant's retained messages, the broker's own `$` topics aside."""
        return len(self._tenants.get(tenant, ())) - self._system.get(tenant, 0)

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
                    if topic[:1] == "$":
                        self._system[tenant] -= 1
                else:
                    out.append(message)
        return out
