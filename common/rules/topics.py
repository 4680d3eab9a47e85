"""MQTT topic filters as rule sources: validation and matching (no broker import: `common` stands
alone, and these are the MQTT 5 rules, section 4.7)."""

from __future__ import annotations

MAX_TOPIC_BYTES = 65535


def topic_filter_problem(topic_filter: str) -> str | None:
    """Why `topic_filter` is not a valid MQTT topic filter, or None when it is."""
    if not topic_filter:
        return "topic filter is empty"
    if "\x00" in topic_filter:
        return "U+0000 in topic filter"
    if len(topic_filter.encode()) > MAX_TOPIC_BYTES:
        return "topic filter longer than 65535 bytes"
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            return "'#' must be the last level and alone in it"
        if "+" in level and level != "+":
            return "'+' must occupy a whole level"
    return None


def topic_match(topic: str, topic_filter: str) -> bool:
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
