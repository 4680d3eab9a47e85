"""The portal's sentences about throttling and drops, from the figures of `tenants.usage.throttling`.

The quota page's "Throttling" section: each limit that slowed or refused something in the last
24 hours, named with its value ("Publish rate (100 messages/s)"), how often in the last hour and
the last 24 hours, what that means and what to do. The dashboard's drop counters: what was
dropped over which period and why, with slowdowns apart (they are not drops).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import dateformat, timezone

from tenants.usage.quota_display import LIMITS, describe
from tenants.usage.throttling import LimitActivity, Window
from tenants.usage.throttling_words import (
    DROP_MEANINGS,
    cause_phrase,
    is_message_drop,
    limit_words,
)

PERIOD_WORDS = {"last_hour": "in the last hour", "last_24h": "in the last 24 hours"}


@dataclass(frozen=True)
class ThrottlingItem:
    limit: str  # the broker's name for it
    quota_key: str | None
    title: str  # "Publish rate (100 messages/s)"
    periods: list[tuple[str, str]]  # (window name, sentence)
    meaning: list[str]
    advice: str
    refused: int = 0  # in the longest window: its journey rows are linked when any


@dataclass(frozen=True)
class CauseCount:
    cause: str
    phrase: str
    count: int
    meaning: str

    @property
    def count_text(self) -> str:
        return f"{self.count:,}"


@dataclass(frozen=True)
class DropsSummary:
    period: str  # "in the last 24 hours"
    messages: int
    message_causes: list[CauseCount]
    refusals: list[CauseCount]  # connections, subscriptions, sessions refused (not messages)
    slowed: list[tuple[str, str]]  # (limit title, "1,234 times"): not drops

    @property
    def messages_text(self) -> str:
        return f"{self.messages:,}"


def times(count: int) -> str:
    return "once" if count == 1 else "twice" if count == 2 else f"{count:,} times"


def when(moment: datetime | None, now: datetime) -> str:
    """A minute as the portal shows times: "14:02 UTC" today, with the date otherwise."""
    if moment is None:
        return ""
    local, today = timezone.localtime(moment), timezone.localtime(now)
    fmt = "H:i T" if local.date() == today.date() else "Y-m-d H:i T"
    return dateformat.format(local, fmt)


# Limits that are not a plan's quota key, by title.
TITLES = {"ca_registration_rate": "CA registrations per minute"}


def limit_title(key: str, limits: dict[str, int]) -> str:
    """The limit in words with its value now: "Publish rate (100 messages/s)"."""
    quota_key = limit_words(key).quota_key
    if quota_key is None:
        return TITLES.get(key) or key.replace("_", " ").capitalize()
    label = LIMITS.get(quota_key, (quota_key, ""))[0]
    value = limits.get(quota_key)
    if value is None:
        return label
    if value == 0 and quota_key == "max_device_publish_rate":
        return f"{label} (no per-device limit)"
    return f"{label} ({describe(quota_key, value)})"


def period_sentence(activity: LimitActivity | None, window: Window, now: datetime) -> str:
    """ "slowed 1,234 times / refused 12 times in the last hour (last at 14:02 UTC)"."""
    period = PERIOD_WORDS.get(window.name, window.name)
    if activity is None or not (activity.slowed or activity.refused):
        return f"nothing {period}"
    parts = []
    if activity.slowed:
        parts.append(f"slowed {times(activity.slowed)}")
    if activity.refused:
        parts.append(f"refused {times(activity.refused)}")
    return f"{' / '.join(parts)} {period} (last at {when(activity.last_at, now)})"


def throttling_items(
    windows: dict[str, Window], limits: dict[str, int], now: datetime | None = None
) -> list[ThrottlingItem]:
    """One item per limit that slowed or refused anything in the longest window."""
    now = now or timezone.now()
    longest = windows["last_24h"]
    by_window = {name: {a.limit: a for a in w.limits} for name, w in windows.items()}
    items = []
    for activity in longest.limits:
        words = limit_words(activity.limit)
        meaning = []
        if activity.slowed and words.slowed:
            meaning.append(words.slowed)
        if activity.refused:
            meaning.append(words.refused)
        periods = [
            (name, period_sentence(by_window[name].get(activity.limit), window, now))
            for name, window in windows.items()
        ]
        items.append(
            ThrottlingItem(
                activity.limit,
                words.quota_key,
                limit_title(activity.limit, limits),
                periods,
                meaning,
                words.advice,
                activity.refused,
            )
        )
    return items


def drops_summary(window: Window, limits: dict[str, int]) -> DropsSummary:
    """What was dropped in the window and why; refusals that are not messages and slowdowns
    (not drops at all) apart."""
    messages, refusals = [], []
    for cause, count in window.dropped.items():
        entry = CauseCount(cause, cause_phrase(cause), count, DROP_MEANINGS.get(cause, ""))
        (messages if is_message_drop(cause) else refusals).append(entry)
    slowed = [(limit_title(a.limit, limits), times(a.slowed)) for a in window.limits if a.slowed]
    return DropsSummary(
        PERIOD_WORDS.get(window.name, window.name),
        window.messages_dropped,
        messages,
        refusals,
        slowed,
    )
