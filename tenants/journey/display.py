"""The journey's rows as the portal shows them: one time format (ISO-like, UTC, to the
millisecond), each outcome as a short chip label, and every reason code with its meaning and,
for a plan's limit, what the plan allows now ("0x96 Message rate too high: your plan allows 100
messages/s"). Words for the rows themselves come from `tenants.journey.words` (the API's too).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from common.journey.schema import CLIENT_EVENTS, OUTCOMES
from common.mqtt.reason_codes import ReasonCode as RC
from tenants.devices.disconnect_reasons import CODES
from tenants.journey.words import code_text, describe_event, describe_outcome
from tenants.time_display import utc_text
from tenants.usage.quota_display import human_bytes
from tenants.usage.throttling_words import limit_words

# The outcome chips: a few words each (the row's reason says the rest).
OUTCOME_LABELS = {
    "delivered": "delivered",
    "no_subscribers": "no subscribers",
    "acl_denied": "ACL denied",
    "quota_exceeded": "over a limit",
    "queue_full": "queue full",
    "expired": "expired",
    "too_large": "too large",
    "dropped": "dropped",
    "served": "shadow request",
    "rule_matched": "rule matched",
    "rule_failed": "rule failed",
    "rule_action_ok": "rule action ok",
    "rule_action_failed": "rule action failed",
    "alarm_changed": "alarm",
}
assert set(OUTCOME_LABELS) == set(OUTCOMES), "every outcome needs a chip label"
EVENT_LABELS = {
    "connected": "connected",
    "connect_failed": "connect refused",
    "disconnected": "disconnected",
    "taken_over": "taken over",
    "subscribed": "subscribed",
    "unsubscribed": "unsubscribed",
    "will_published": "will published",
    "will_discarded": "will refused",
    "session_expired": "session expired",
    "replayed": "replayed",
}
assert set(EVENT_LABELS) == set(CLIENT_EVENTS), "every client event needs a chip label"


def time_text(moment: datetime) -> str:
    """`2026-11-27 14:02:03.123 UTC`: every journey time on the portal, whatever TIME_ZONE says
    (the portal's one format, `tenants.time_display`, to the millisecond)."""
    return utc_text(moment, milliseconds=True)


def retention_text(hours: int) -> str:
    """How long the plan keeps the journey: "24 hours", "7 days"."""
    if hours % 24 == 0 and hours > 24:
        return _count(hours // 24, "day")
    return _count(hours, "hour")


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _allows(quota_key: str, value: int) -> str:
    """What a limit's value allows, as the end of "your plan allows …"."""
    return {
        "max_publish_rate": f"{value:,} messages/s",
        "max_device_publish_rate": f"{value:,} messages/s per device",
        "max_inbound_bytes_rate": f"{human_bytes(value)}/s in",
        "max_outbound_bytes_rate": f"{human_bytes(value)}/s out",
        "max_message_size": f"messages up to {human_bytes(value)}",
        "max_retained_messages": _count(value, "retained message"),
        "max_connections": f"{_count(value, 'connection')} at once",
        "max_subscriptions_per_client": f"{_count(value, 'subscription')} per client",
        "max_queued_messages": f"{_count(value, 'queued message')} per session",
        "max_persistent_sessions": _count(value, "persistent session"),
    }.get(quota_key, f"{quota_key} = {value:,}")


def plan_allows(code: int | None, limits: dict[str, int], quota: str | None = None) -> str:
    """ "your plan allows 100 messages/s" for a refusal by a limit (`quota`: the broker's name
    for it, as journey rows and usage causes carry it), or for the codes only a limit gives
    (0x96, 0x95); "" where no limit is behind the code."""
    keys: list[str] = []
    if quota:
        quota_key = limit_words(quota).quota_key
        keys = [quota_key] if quota_key else []
    elif code == RC.MESSAGE_RATE_TOO_HIGH:
        keys = ["max_publish_rate", "max_device_publish_rate"]
    elif code == RC.PACKET_TOO_LARGE:
        keys = ["max_message_size"]
    # A per-device rate of 0 means none (quota_display.NO_LIMIT): nothing to say about it.
    allowed = [_allows(k, limits[k]) for k in keys if limits.get(k)]
    return f"your plan allows {' and '.join(allowed)}" if allowed else ""


def code_meaning(code: int | None, limits: dict[str, int], quota: str | None = None) -> str:
    """A reason code with its meaning: "0x96 Message rate too high: your plan allows 100
    messages/s", or "0x87 Not authorized" where no limit is behind it; "" without a code."""
    text = code_text(code)
    if not text:
        return ""
    allows = plan_allows(code, limits, quota)
    return f"{text}: {allows}" if allows else text


def code_meanings(limits: dict[str, int]) -> dict[int, str]:
    """Every reason code MQTT 5 names, with its meaning: for pages whose scripts show codes
    the broker sends (the MQTT client's SUBACK and DISCONNECT)."""
    return {int(code): code_meaning(int(code), limits) for code in CODES}


def message_row(row: dict[str, Any], limits: dict[str, int]) -> dict[str, Any]:
    """One outcome row for the Journey page (the API's fields plus what the page shows)."""
    described = describe_outcome(row)
    size = described["size"]
    return {
        **described,
        "time_text": time_text(described["time"]),
        "iso": described["time"].astimezone(UTC).isoformat(timespec="milliseconds"),
        "size_text": human_bytes(size) if size is not None else "",
        "outcome_label": OUTCOME_LABELS.get(described["outcome"], described["outcome"]),
        "code_meaning": code_meaning(described["reason_code"], limits, described["quota"]),
    }


def event_row(row: dict[str, Any], limits: dict[str, int]) -> dict[str, Any]:
    """One client event for a device's timeline. A successful CONNACK's 0x00 says nothing a
    person needs: it is not shown."""
    described = describe_event(row)
    label = EVENT_LABELS.get(described["event"], described["event"])
    reason = described["reason"] or ""
    code = described["reason_code"]
    shown = None if described["event"] == "connected" and code == 0 else code
    return {
        **described,
        "time_text": time_text(described["time"]),
        "iso": described["time"].astimezone(UTC).isoformat(timespec="milliseconds"),
        "code_meaning": code_meaning(shown, limits),
        "event_label": label,
        # The reason when it says more than the event's name does.
        "reason_text": "" if reason in (described["event"], label) else reason,
    }
