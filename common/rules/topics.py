"""MQTT topic filters as rule sources: validation and matching are the codec's
(`common.mqtt.topics`, MQTT 5 section 4.7); the regex pushdown for readers is the dialect's own."""

from __future__ import annotations

from common.mqtt.errors import TopicFilterInvalid
from common.mqtt.topics import topic_matches, validate_topic_filter


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


def topic_filter_regex(topic_filter: str) -> str:
    """A regular expression (Java's and Python's syntax alike) matching the topics
    `topic_filter` matches, for a reader's pushdown (e.g. Spark's `rlike`). Anchored with ^ and $,
    it may also take a topic ending in a newline: a prefilter whose rows `CompiledRule.apply`
    checks again, never the decision itself."""
    levels = topic_filter.split("/")
    parts: list[str] = []
    tail = ""
    if levels[-1] == "#":
        levels = levels[:-1]
        tail = "(/.*)?" if levels else ".*"
    for level in levels:
        parts.append("[^/]*" if level == "+" else _escape(level))
    body = "/".join(parts) + tail
    guard = r"(?!\$)" if topic_filter[:1] in ("+", "#") else ""
    return f"^{guard}{body}$"


def _escape(text: str) -> str:
    # Backslash before every non-alphanumeric character: a literal in Java and Python regexes.
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in text)
