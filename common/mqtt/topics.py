"""Topic names and filters: validation (MQTT-4.7) and matching."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from common.mqtt.errors import TopicFilterInvalid, TopicNameInvalid

MAX_TOPIC_BYTES = 65535
SHARE_PREFIX = "$share/"
REPLAY_PREFIX = "$replay/"
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


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


def parse_replay(topic_filter: str, now: float) -> tuple[float | None, str]:
    """`$replay/{from}/{filter}` -> (its start as a Unix time, filter); other filters -> (None,
    filter). `from` is an RFC 3339 instant (`2026-12-06T10:00:00Z`) or a duration back from
    `now` (`90s`, `30m`, `1h`, `7d`)."""
    if not topic_filter.startswith(REPLAY_PREFIX):
        return None, topic_filter
    start, sep, inner = topic_filter[len(REPLAY_PREFIX) :].partition("/")
    if not start or not sep or not inner:
        raise TopicFilterInvalid("replay needs $replay/{from}/{filter}")
    if inner.startswith((SHARE_PREFIX, REPLAY_PREFIX)):
        raise TopicFilterInvalid("a replay's filter cannot be shared or replayed again")
    validate_topic_filter(inner)
    unit = _DURATION_UNITS.get(start[-1])
    if unit is not None and start[:-1].isdigit():
        return now - int(start[:-1]) * unit, inner
    try:
        moment = datetime.fromisoformat(start)
    except ValueError:
        raise TopicFilterInvalid(
            f"replay start {start!r} is neither an RFC 3339 instant nor a duration (90s, 30m, "
            "1h, 7d)"
        ) from None
    if moment.tzinfo is None:
        raise TopicFilterInvalid(f"replay start {start!r} needs a time zone (Z or +hh:mm)")
    return moment.timestamp(), inner


def routed_filter(topic_filter: str) -> tuple[str | None, str]:
    """The shared group (or None) and the filter a subscription routes: `$share/{group}/F` and
    `$replay/{from}/F` route F (checked by `parse_shared` / `parse_replay` when subscribing)."""
    if topic_filter.startswith(REPLAY_PREFIX):
        parts = topic_filter.split("/", 2)
        return None, parts[2] if len(parts) == 3 else ""
    return parse_shared(topic_filter)


def hidden_from_wildcards(topic: str) -> bool:
    """A topic a leading `+` or `#` never matches: one starting with `$` (MQTT-4.7.2-1). The one
    place this rule is written; the router's trie, the ACLs and the matchers below ask it."""
    return topic[:1] == "$"


def levels_match(filter_levels: Sequence[str], topic_levels: Sequence[str]) -> bool:
    """Does a filter match a topic, both already split on `/` (callers that test one topic
    against many filters split it once)? The `$` rule applies."""
    if topic_levels and hidden_from_wildcards(topic_levels[0]) and filter_levels[0] in ("+", "#"):
        return False
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Does `topic_filter` match `topic`? `$` topics are not matched by a leading wildcard."""
    return levels_match(topic_filter.split("/"), topic.split("/"))


def filter_covers(outer: Sequence[str], inner: Sequence[str]) -> bool:
    """True when every topic matched by filter `inner` is matched by filter `outer` (split)."""
    for index, level in enumerate(outer):
        if level == "#":
            return True
        if index >= len(inner):
            return False
        if inner[index] == "#":
            return False
        if level == "+":
            continue
        if inner[index] == "+" or inner[index] != level:
            return False
    return len(outer) == len(inner)


def filters_intersect(a: Sequence[str], b: Sequence[str]) -> bool:
    """True when some topic is matched by both filters (split)."""
    for index in range(max(len(a), len(b))):
        left = a[index] if index < len(a) else None
        right = b[index] if index < len(b) else None
        if left == "#" or right == "#":
            return True
        if left is None or right is None:
            return False
        if left != "+" and right != "+" and left != right:
            return False
    return True


def topic_filter_regex(topic_filter: str) -> str:
    """The one translation of a (valid) topic filter into a regular expression: it full-matches
    exactly the topics `topic_matches` matches, `$` rule included. Portable on purpose: no flags,
    no look-around, no `\\Q…\\E`, every ASCII punctuation escaped with a backslash, so Python's
    `re.fullmatch`, RE2 (DuckDB's `regexp_full_match`) and Java (Spark's `rlike`, anchored by
    the caller as `^(?:…)\\z`) read it alike. `[\\s\\S]` rather than `.`: a topic may hold a newline.
    """
    levels = topic_filter.split("/")
    parts: list[str] = []
    for index, level in enumerate(levels):
        first = index == 0
        if level == "#":
            # The parent level too (`a/#` matches `a`); a leading `#` never reaches `$` topics.
            rest = r"(?:[^$][\s\S]*)?" if first else r"(?:/[\s\S]*)?"
            return "/".join(parts) + rest
        if level == "+":
            parts.append(r"(?:[^$/][^/]*)?" if first else "[^/]*")
        else:
            parts.append(_regex_literal(level))
    return "/".join(parts)


def _regex_literal(text: str) -> str:
    # A backslash before every ASCII character but letters, digits and `_` (a literal in all
    # three dialects; RE2 refuses one before a non-ASCII character, which needs none).
    return "".join("\\" + c if c.isascii() and not (c.isalnum() or c == "_") else c for c in text)
