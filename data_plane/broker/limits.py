"""The broker's own limits, shared by admission, the handshake and the broker."""

from __future__ import annotations

NEVER_EXPIRES = 0xFFFFFFFF  # a session expiry interval that never runs out
MAX_DELAY = 4_294_967  # seconds a `$delayed/{seconds}/...` publish may wait, as EMQX
# Topics and filters deeper than this are refused (as EMQX's max_topic_levels): matching walks
# levels, and nothing real needs more.
MAX_TOPIC_LEVELS = 128


def too_deep(topic: str) -> bool:
    return topic.count("/") >= MAX_TOPIC_LEVELS
