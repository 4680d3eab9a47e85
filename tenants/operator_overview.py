"""The operators' overview (reads): every tenant with its plan, people, devices, connections, the
last day's messages and what the broker holds for it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count, Q, Sum

from tenants.devices.selectors import PRESENCE_STALE_AFTER
from tenants.inspection.selectors import inspection_counts
from tenants.models import Device, DeviceConnection, Tenant, Usage


def tenants_overview(*, now: datetime) -> list[dict]:
    """One row per tenant, by slug: `tenant` (with `members` and `owners` counted), `devices`,
    `connections` (live now), `messages_in`/`messages_out` (the 24 hours before `now`),
    `offline_sessions`, `queued`, `retained`."""
    since = now - timedelta(hours=24)
    live = DeviceConnection.objects.filter(heartbeat_at__gt=now - PRESENCE_STALE_AFTER)
    connections = dict(live.values("tenant").annotate(n=Count("id")).values_list("tenant", "n"))
    usage = {
        row["tenant"]: row
        for row in Usage.objects.filter(minute__gte=since)
        .values("tenant")
        .annotate(messages_in=Sum("messages_in"), messages_out=Sum("messages_out"))
    }
    devices = dict(
        Device.objects.values("tenant").annotate(n=Count("id")).values_list("tenant", "n")
    )
    tenants = Tenant.objects.select_related("plan").annotate(
        members=Count("memberships", distinct=True),
        owners=Count("memberships", filter=Q(memberships__role="owner"), distinct=True),
    )
    held = inspection_counts()  # what the broker holds: sessions offline, queued, retained
    return [
        {
            "tenant": t,
            "devices": devices.get(t.id, 0),
            "connections": connections.get(t.id, 0),
            "messages_in": (usage.get(t.id) or {}).get("messages_in") or 0,
            "messages_out": (usage.get(t.id) or {}).get("messages_out") or 0,
            **{"offline_sessions": 0, "queued": 0, "retained": 0, **held.get(t.id, {})},
        }
        for t in tenants.order_by("slug")
    ]
