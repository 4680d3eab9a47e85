"""Which journey rows stand behind a portal counter: every "dropped" or "refused" figure links to
the Journey page filtered by the outcomes it counts.

The counters come from the broker's metering (`Usage.dropped` by cause, `tenants.usage.throttling`) and
its `$SYS` figures; the journey records the same events as rows with an outcome
(`common.journey.schema`). The causes map onto outcomes as the broker's journey recorder maps
them (data_plane/observability/journey.py `DROP_CAUSES`, `JourneyRecorder.refused`; a test
holds the two together).
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from django.urls import reverse

from common.journey.schema import (
    ACL_DENIED,
    DROPPED,
    EXPIRED,
    LOSSES,
    QUEUE_FULL,
    QUOTA_EXCEEDED,
    TOO_LARGE,
)
from tenants.usage.throttling_words import cause_limit, limit_words

# A copy lost at one subscriber: the session's cause -> the outcome its row carries.
DROP_OUTCOMES: dict[str, str] = {
    "queue_full": QUEUE_FULL,
    "expired": EXPIRED,
    "too_large": TOO_LARGE,
    "acl": ACL_DENIED,
    "offline_qos0": DROPPED,
    "group_full": QUEUE_FULL,  # a shared group with no member kept all it may
    "not_authorized": ACL_DENIED,  # no member of a shared group may read it
}
# A limit's refusal of a PUBLISH: `too_large` for the message size, `queue_full` for what a
# shared group could not keep (its drop row's outcome), `quota_exceeded` otherwise.
LIMIT_OUTCOMES: dict[str, str] = {
    "message_size": TOO_LARGE,
    "group_messages": QUEUE_FULL,
    "group_bytes": QUEUE_FULL,
}
# Limits that refuse a CONNECT: the client's `connect_failed` event stands behind each refusal.
# (A refused subscription is no journey row yet: the broker records granted ones only.)
LIMIT_EVENTS: dict[str, str] = {
    "connections": "connect_failed",
    "persistent_sessions": "connect_failed",
}


def limit_outcomes(limit: str) -> tuple[str, ...]:
    """The outcomes of the messages a limit refused; () for a limit that refuses connections,
    subscriptions or sessions (no message row stands behind those)."""
    if not limit_words(limit).refuses_messages:
        return ()
    return (LIMIT_OUTCOMES.get(limit, QUOTA_EXCEEDED),)


def cause_outcomes(cause: str) -> tuple[str, ...]:
    """The outcomes behind a metered drop cause (`queue_full`, `quota_publish_rate`, …)."""
    limit = cause_limit(cause)
    if limit is not None:
        return limit_outcomes(limit)
    return (DROP_OUTCOMES.get(cause, DROPPED),)


def limit_url(limit: str) -> str:
    """The journey rows behind a limit's refusals: its messages, or its refused connections;
    "" where none are recorded."""
    outcomes = limit_outcomes(limit)
    if outcomes:
        return journey_url(outcomes)
    event = LIMIT_EVENTS.get(limit)
    return events_url((event,)) if event else ""


def cause_url(cause: str) -> str:
    """The journey rows behind a metered drop cause; "" where none are recorded."""
    limit = cause_limit(cause)
    return limit_url(limit) if limit is not None else journey_url(cause_outcomes(cause))


def events_url(events: tuple[str, ...] = (), *, client: str | None = None) -> str:
    """The Journey page's client events, of these kinds (every kind when empty)."""
    query = {"event": ",".join(events)} if events else {}
    if client:
        query["client"] = client
    url = reverse("portal:journey-events")
    return f"{url}?{urlencode(query)}" if query else url


def journey_url(
    outcomes: tuple[str, ...] = LOSSES,
    *,
    start: datetime | None = None,
    client: str | None = None,
) -> str:
    """The Journey page filtered by `outcomes` (the API's comma-separated form), from `start`
    (the page's own default, the last 24 hours, when None)."""
    query: dict[str, str] = {}
    if outcomes:
        query["outcome"] = ",".join(outcomes)
    if client:
        query["client"] = client
    if start is not None:
        query["from"] = start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    url = reverse("portal:journey")
    return f"{url}?{urlencode(query)}" if query else url
