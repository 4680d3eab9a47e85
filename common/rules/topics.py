"""MQTT topic filters as rule sources: validation, matching and the regex a reader pushes down
(`topic_filter_regex`) are the codec's (`common.mqtt.topics`, MQTT 5 section 4.7), in the
dialect's words."""

from __future__ import annotations

from common.mqtt.errors import TopicFilterInvalid
from common.mqtt.topics import topic_filter_regex, topic_matches, validate_topic_filter

__all__ = ["topic_filter_problem", "topic_filter_regex", "topic_match"]


def topic_filter_problem(topic_filter: str) -> str | None:
    """Why `topic_filter` is not a valid MQTT topic filter, or None when it is."""
    try:
        validate_topic_filter(topic_filter)
    except TopicFilterInvalid as exc:
        return str(exc)
    return None


def topic_match(topic: str, topic_filter: str) -> bool:
    """Does `topic_filter` match `topic`? (The codec's matcher, arguments in the dialect's order.)"""
    return topic_matches(topic_filter, topic)
