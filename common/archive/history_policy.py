"""What a tenant's archive keeps, and for how long: one set of rules for the broker (what it
archives) and the control plane (what it validates, deletes and shows).

A message is archived if and only if something needs it:

- a **history policy** of the tenant matches its topic (MQTT wildcards), or, while the tenant
  has none, its plan's default history keeps every topic (`history_default_days` > 0: the filter
  `#`); both only while the tenant's `archive_enabled` is on;
- or an **enabled rule** of the tenant reads it: its FROM names a filter matching the topic (the
  live rules job reads the archive's live segments, so a rule's feed is archived whatever the
  policies say).

A lifecycle row (`client.connected`, `client.disconnected`, `session.subscribed`,
`session.unsubscribed`) is archived only if an enabled rule reads that `$events/…` source, or a
policy names it (e.g. `$events/client_connected`, or `$events/#` for all of them).

Retention is per tenant and by whole hours of history (`archive/tenant={slug}/date=/hour=`):
an hour is deleted once it is older than the tenant's longest policy (each capped at the plan's
`max_history_days`), or its plan's default while it has no policy; rows archived only for rules
are kept `RULE_FEED_DAYS` (a day), so a rule can be run over the last day without a policy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from common.archive.schema import EVENT_TOPICS
from common.mqtt.errors import TopicFilterInvalid
from common.mqtt.topics import topic_matches, validate_topic_filter

# Days of history kept for a tenant whose only needs are its enabled rules' feeds.
RULE_FEED_DAYS = 1
# The plan's default history keeps every topic.
DEFAULT_FILTER = "#"
EVENTS_PREFIX = "$events/"
MAX_FILTER_LENGTH = 256


@dataclass(frozen=True)
class ArchiveNeeds:
    """What the broker archives of one tenant: messages whose topic one of `filters` matches,
    lifecycle rows whose event is in `events` (archive event names, e.g. `client.connected`)."""

    filters: tuple[str, ...] = ()
    events: frozenset[str] = field(default_factory=frozenset)
    # What of it the tenant's enabled rules read (a part of the above): the broker also hands
    # these rows to the live rules job as they are archived (`data_plane.storage.live_feed`).
    rule_filters: tuple[str, ...] = ()
    rule_events: frozenset[str] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.filters or self.events)

    def archives(self, topic: str) -> bool:
        return any(topic_matches(f, topic) for f in self.filters)


NOTHING = ArchiveNeeds()


def policy_filter_problem(topic_filter: str) -> str | None:
    """Why `topic_filter` cannot be a history policy's filter, or None when it can."""
    if not isinstance(topic_filter, str) or not topic_filter:
        return "Give a topic filter, e.g. sensors/# or sensors/+/temperature."
    if len(topic_filter) > MAX_FILTER_LENGTH:
        return f"A topic filter is at most {MAX_FILTER_LENGTH} characters."
    try:
        topic_filter.encode("utf-8")
    except UnicodeEncodeError:
        return "A topic filter is UTF-8 text: this one holds a lone surrogate."
    try:
        validate_topic_filter(topic_filter)
    except TopicFilterInvalid as exc:
        return f"Not a valid MQTT topic filter: {exc}"
    if topic_filter.startswith("$"):
        if not topic_filter.startswith(EVENTS_PREFIX) or not _events_named(topic_filter):
            known = ", ".join(sorted(EVENT_TOPICS))
            return (
                "Topics starting with $ are the broker's own and are not archived; of them only "
                f"the lifecycle events can be kept: {known} (or $events/# for all)."
            )
    return None


def _events_named(topic_filter: str) -> frozenset[str]:
    """The archive events an `$events/…` filter names."""
    return frozenset(
        event for source, event in EVENT_TOPICS.items() if topic_matches(topic_filter, source)
    )


def archive_needs(
    *,
    policy_filters: Iterable[str],
    default_days: int,
    archive_enabled: bool,
    rule_sources: Iterable[tuple[Iterable[str], Iterable[str]]] = (),
) -> ArchiveNeeds:
    """What to archive of a tenant with these policies' filters, plan default, setting, and
    enabled rules (each as its FROM's `(topic_filters, events)`, `CompiledRule`'s)."""
    filters: dict[str, None] = {}
    events: set[str] = set()
    if archive_enabled:
        policies = list(policy_filters)
        if not policies and default_days > 0:
            policies = [DEFAULT_FILTER]
        for topic_filter in policies:
            if topic_filter.startswith(EVENTS_PREFIX):
                events.update(_events_named(topic_filter))
            else:
                filters[topic_filter] = None
    live_filters: dict[str, None] = {}
    live_events: set[str] = set()
    for rule_filters, rule_events in rule_sources:
        live_filters.update(dict.fromkeys(rule_filters))
        live_events.update(rule_events)
    filters.update(live_filters)
    events.update(live_events)
    if DEFAULT_FILTER in filters:  # every other filter is inside it
        filters = {DEFAULT_FILTER: None}
    if DEFAULT_FILTER in live_filters:
        live_filters = {DEFAULT_FILTER: None}
    return ArchiveNeeds(
        tuple(filters), frozenset(events), tuple(live_filters), frozenset(live_events)
    )


def retention_days(
    *,
    policy_days: Iterable[int],
    default_days: int,
    max_days: int,
    archive_enabled: bool,
    has_rules: bool,
) -> int:
    """How many days of a tenant's history to keep: its longest policy (capped at the plan's
    `max_days`: a plan lowered later shortens what is kept), its plan's default while it has no
    policy, at least `RULE_FEED_DAYS` while it has enabled rules; 0 keeps nothing."""
    days = 0
    if archive_enabled:
        policies = list(policy_days)
        days = max((min(d, max_days) for d in policies), default=0) if policies else default_days
    if has_rules:
        days = max(days, RULE_FEED_DAYS)
    return days
