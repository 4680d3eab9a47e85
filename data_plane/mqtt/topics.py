"""Topic names and filters: validation (MQTT-4.7) and matching."""

from __future__ import annotations

from data_plane.mqtt.errors import TopicFilterInvalid, TopicNameInvalid

MAX_TOPIC_BYTES = 65535
SHARE_PREFIX = "$share/"


def validate_topic_name(topic: str) -> None:
    """A PUBLISH topic: non-empty, no wildcards, no U+0000 (MQTT-4.7.3-1, 4.7.3-2, 3.3.2-2)."""
    if not topic:
        raise TopicNameInvalid("topic name is empty")
    if "+" in topic or "#" in topic:
        raise TopicNameInvalid("wildcards are not allowed in a topic name")
    if "\x00" in topic:
        raise TopicNameInvalid("U+0000 in topic name")
    if len(topic) > MAX_TOPIC_BYTES // 4 and len(topic.encode()) > MAX_TOPIC_BYTES:
        raise TopicNameInvalid("topic name longer than 65535 bytes")


def validate_topic_filter(topic_filter: str) -> None:
    """A SUBSCRIBE filter: `#` only last and alone in its level, `+` alone in its level."""
    if not topic_filter:
        raise TopicFilterInvalid("topic filter is empty")
    if "\x00" in topic_filter:
        raise TopicFilterInvalid("U+0000 in topic filter")
    if len(topic_filter) > MAX_TOPIC_BYTES // 4 and len(topic_filter.encode()) > MAX_TOPIC_BYTES:
        raise TopicFilterInvalid("topic filter longer than 65535 bytes")
    if "+" not in topic_filter and "#" not in topic_filter:
        return
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            raise TopicFilterInvalid("'#' must be the last level and alone in it")
        if "+" in level and level != "+":
            raise TopicFilterInvalid("'+' must occupy a whole level")


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """`$share/{group}/{filter}` -> (group, filter); other filters -> (None, filter)."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, sep, inner = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group or not sep or not inner:
        raise TopicFilterInvalid("shared subscription needs $share/{group}/{filter}")
    if "+" in group or "#" in group:
        raise TopicFilterInvalid("shared subscription group name may not contain wildcards")
    validate_topic_filter(inner)
    return group, inner


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Does `topic_filter` match `topic`? `$` topics are not matched by a leading wildcard."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)
