"""The quota page's rows: each limit with its unit, in words, and what the tenant uses of it now.

Usage comes from what the platform already records: live connections (`DeviceConnection`),
retained messages and persistent sessions (the broker's tables), and the last complete minute of
`Usage` for the rates. Reads only; scoped to one tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from tenants.models import HistoryPolicy, MqttSession, RetainedMessage, Tenant, Usage

# key -> (label, unit of the limit)
LIMITS = {
    "max_connections": ("Concurrent connections", "connections"),
    "max_publish_rate": ("Publish rate", "messages/s"),
    "max_inbound_bytes_rate": ("Inbound bandwidth", "bytes/s"),
    "max_outbound_bytes_rate": ("Outbound bandwidth", "bytes/s"),
    "max_message_size": ("Message size", "bytes"),
    "max_subscriptions_per_client": ("Subscriptions per client", "subscriptions"),
    "max_queued_messages": ("Queued messages per session", "messages"),
    "max_retained_messages": ("Retained messages", "messages"),
    "max_session_expiry": ("Session expiry", "seconds"),
    "max_keepalive": ("Keep-alive", "seconds"),
    "max_persistent_sessions": ("Persistent sessions", "sessions"),
    "max_device_publish_rate": ("Publish rate per device", "messages/s"),
    "max_rule_outputs": ("Rule outputs per message", "outputs"),
    "max_history_days": ("History kept", "days"),
    "max_history_policies": ("History policies", "policies"),
    "max_shadow_size": ("Device shadow size", "bytes"),
    "shadow_history_days": ("Device shadow history", "days"),
    "max_shadows": ("Device shadows", "shadows"),
    "max_shadow_versions": ("Device shadow versions kept", "versions"),
    "max_certificates": ("Certificates", "certificates"),
    "max_ca_certificates": ("Registered CA certificates", "CAs"),
    "max_shared_groups": ("Shared subscription groups", "groups"),
    "max_group_messages": ("Messages a shared group keeps", "messages"),
    "max_group_bytes": ("Payload bytes a shared group keeps", "bytes"),
    "group_retention": ("Shared group retention", "seconds"),
    "max_alarms": ("Alarm definitions", "alarms"),
    "max_alarm_keys": ("Alarm states (alarm, key)", "keys"),
    "max_sink_outbox_messages": ("Outputs a sink's outbox keeps", "outputs"),
    "max_sink_outbox_bytes": ("Bytes a sink's outbox keeps", "bytes"),
}

# Limits whose 0 means "none" rather than "nothing allowed": what the page says instead.
NO_LIMIT = {
    "max_device_publish_rate": "no per-device limit: devices share the tenant's rate fairly",
}
# Limits that apply to each one of something, not to a total the tenant uses now.
PER_WHAT = {
    "max_message_size": "per message",
    "max_queued_messages": "per session",
    "max_session_expiry": "per session",
    "max_keepalive": "per session",
    "max_device_publish_rate": "per device",
    "max_history_days": "per history policy",
    "max_shadow_size": "per shadow",
    "shadow_history_days": "per shadow",
    "max_shadow_versions": "per shadow",
    "max_group_messages": "per shared group",
    "max_group_bytes": "per shared group",
    "group_retention": "per shared group",
    "max_sink_outbox_messages": "per sink (a rule action)",
    "max_sink_outbox_bytes": "per sink (a rule action)",
}


@dataclass(frozen=True)
class QuotaRow:
    key: str
    label: str
    limit: int
    limit_text: str
    used: float | None  # None: not a quantity used over time (a per-message or per-session cap)
    used_text: str
    percent: int | None
    overridden: bool


def human_bytes(value: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "bytes" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def human_seconds(value: int) -> str:
    if value >= 86_400 and value % 86_400 == 0:
        days = value // 86_400
        return f"{days} day{'s' if days != 1 else ''} ({value:,} s)"
    if value >= 3600 and value % 3600 == 0:
        hours = value // 3600
        return f"{hours} hour{'s' if hours != 1 else ''} ({value:,} s)"
    return f"{value:,} s"


def describe(key: str, value: float) -> str:
    unit = LIMITS.get(key, ("", ""))[1]
    if unit == "bytes":
        return human_bytes(value)
    if unit == "bytes/s":
        return human_bytes(value) + "/s"
    if unit == "seconds":
        return human_seconds(int(value))
    if unit == "messages/s":
        return f"{value:,.1f} messages/s" if value % 1 else f"{int(value):,} messages/s"
    return f"{int(value):,} {unit}"


def usage_now(tenant: Tenant) -> dict[str, float]:
    """What the tenant uses now of the limits that measure something over time."""
    from tenants.alarms import selectors as alarm_selectors
    from tenants.devices.identity import cas_counted
    from tenants.devices.selectors import live_connections
    from tenants.shared_groups.selectors import shared_groups_count
    from tenants.tenant.stored_limits import certificates_count, shadows_count

    connections = live_connections(tenant=tenant)
    subscriptions = max((len(c.subscriptions or []) for c in connections), default=0)
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    last = Usage.objects.filter(tenant=tenant, minute=minute).first()
    sessions = MqttSession.objects.filter(tenant=tenant).count()
    return {
        "max_connections": connections.count(),
        "max_subscriptions_per_client": subscriptions,
        "max_retained_messages": RetainedMessage.objects.filter(tenant=tenant)
        .exclude(topic__startswith="$")
        .count(),
        "max_persistent_sessions": sessions,
        "max_history_policies": HistoryPolicy.objects.filter(tenant=tenant).count(),
        "max_shadows": shadows_count(tenant.id),
        "max_certificates": certificates_count(tenant.id),
        "max_ca_certificates": cas_counted(tenant).count(),
        "max_shared_groups": shared_groups_count(tenant=tenant),
        "max_alarms": alarm_selectors.alarm_definitions_count(tenant=tenant),
        "max_alarm_keys": alarm_selectors.alarm_states_count(tenant=tenant),
        "max_publish_rate": (last.messages_in / 60) if last else 0,
        "max_inbound_bytes_rate": (last.bytes_in / 60) if last else 0,
        "max_outbound_bytes_rate": (last.bytes_out / 60) if last else 0,
    }


def quota_rows(tenant: Tenant, limits: dict[str, int]) -> list[QuotaRow]:
    used = usage_now(tenant)
    overrides = tenant.quota_overrides or {}
    rows = []
    for key, limit in limits.items():
        label = LIMITS.get(key, (key, ""))[0]
        value = used.get(key)
        percent = None
        if value is not None and limit:
            percent = min(100, round(100 * value / limit))
        used_text = PER_WHAT.get(key) or describe(key, value or 0)
        if key in ("max_publish_rate", "max_inbound_bytes_rate", "max_outbound_bytes_rate"):
            used_text += " (last minute's average)"
        if key == "max_subscriptions_per_client":
            used_text += " (busiest connected client)"
        limit_text = NO_LIMIT[key] if key in NO_LIMIT and not limit else describe(key, limit)
        rows.append(
            QuotaRow(key, label, limit, limit_text, value, used_text, percent, key in overrides)
        )
    return rows
