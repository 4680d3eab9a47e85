"""Reads: how often the tenant's limits slowed or refused something, and what was dropped, over
the last hour and the last 24 hours.

From the per-minute usage rows the brokers write (data_plane/tenancy/metering.py):
`Usage.throttled` counts slowdowns by limit (a publisher paused, deliveries paced: nothing lost),
`Usage.dropped` counts drops by cause, a limit's refusals among them as `quota_<limit>`. A broker
writes a minute once it is over, so the figures run up to the last complete minute. Every read
is scoped to one tenant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from tenants.models import Tenant, Usage
from tenants.usage.throttling_words import cause_limit, is_message_drop, limit_words

# The windows shown, by the name the API gives them.
WINDOWS: dict[str, timedelta] = {"last_hour": timedelta(hours=1), "last_24h": timedelta(hours=24)}


@dataclass
class LimitActivity:
    """What one limit did in a window. Times are the start of the minute it last happened."""

    limit: str  # the broker's name for it: publish_rate, connections… (throttling_words.LIMITS)
    slowed: int = 0
    refused: int = 0
    last_slowed_at: datetime | None = None
    last_refused_at: datetime | None = None

    @property
    def last_at(self) -> datetime | None:
        return max((t for t in (self.last_slowed_at, self.last_refused_at) if t), default=None)


@dataclass
class Window:
    name: str
    since: datetime  # minutes starting at or after this
    until: datetime
    limits: list[LimitActivity] = field(default_factory=list)  # busiest first
    dropped: dict[str, int] = field(default_factory=dict)  # every cause as metered

    @property
    def messages_dropped(self) -> int:
        """Messages (or copies of one) not taken or not delivered: the drop causes less the
        connections, subscriptions and sessions a limit refused."""
        return sum(n for cause, n in self.dropped.items() if is_message_drop(cause))

    @property
    def slowed(self) -> int:
        return sum(a.slowed for a in self.limits)


def limit_activity(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Window]:
    """The tenant's slowdowns, refusals and drops per window (`WINDOWS`), in one query over the
    minutes of the longest window that recorded any."""
    now = now or timezone.now()
    longest = max(WINDOWS.values())
    rows = (
        Usage.objects.filter(tenant=tenant, minute__gte=now - longest, minute__lte=now)
        .exclude(dropped={}, throttled={})
        .order_by("minute")
        .values_list("minute", "dropped", "throttled")
    )
    building = {name: _Tally(now - span) for name, span in WINDOWS.items()}
    for minute, dropped, throttled in rows:
        for tally in building.values():
            if minute >= tally.since:
                tally.add(minute, _counts(dropped), _counts(throttled))
    return {name: tally.window(name, now) for name, tally in building.items()}


class _Tally:
    def __init__(self, since: datetime) -> None:
        self.since = since
        self.limits: dict[str, LimitActivity] = {}
        self.dropped: dict[str, int] = {}

    def _limit(self, key: str) -> LimitActivity:
        activity = self.limits.get(key)
        if activity is None:
            activity = self.limits[key] = LimitActivity(key)
        return activity

    def add(self, minute: datetime, dropped: dict, throttled: dict) -> None:
        # Rows come oldest first, so the last minute seen is the latest.
        for key, count in throttled.items():
            count = _count(count)
            if count:
                activity = self._limit(key)
                activity.slowed += count
                activity.last_slowed_at = minute
        for cause, count in dropped.items():
            count = _count(count)
            if not count:
                continue
            self.dropped[cause] = self.dropped.get(cause, 0) + count
            key = cause_limit(cause)
            if key is not None:
                activity = self._limit(key)
                activity.refused += count
                activity.last_refused_at = minute

    def window(self, name: str, now: datetime) -> Window:
        limits = sorted(self.limits.values(), key=lambda a: (-(a.refused + a.slowed), a.limit))
        dropped = dict(sorted(self.dropped.items(), key=lambda item: (-item[1], item[0])))
        return Window(name, self.since, now, limits, dropped)


def _counts(value: object) -> dict:
    """A usage row's JSON object of counts (anything else, from a writer gone wrong: none)."""
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int:
    """A count from a usage row's JSON (integers; anything else counts as none)."""
    return value if isinstance(value, int) and value > 0 else 0


def figures(windows: dict[str, Window], limits: dict[str, int]) -> dict[str, dict]:
    """The windows as plain data (the REST API's `throttling` object); `limits` are the quotas in
    force, each limit's `value`."""

    def limit(activity: LimitActivity) -> dict:
        quota_key = limit_words(activity.limit).quota_key
        return {
            "limit": activity.limit,
            "quota_key": quota_key,
            "value": limits.get(quota_key) if quota_key else None,
            "slowed": activity.slowed,
            "refused": activity.refused,
            "last_slowed_at": activity.last_slowed_at,
            "last_refused_at": activity.last_refused_at,
        }

    return {
        name: {
            "from": window.since,
            "to": window.until,
            "limits": [limit(a) for a in window.limits],
            "dropped": {"messages": window.messages_dropped, "causes": window.dropped},
        }
        for name, window in windows.items()
    }
